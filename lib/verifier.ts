import { timingSafeEqual, type Hash } from 'node:crypto'
import type { IncomingHttpHeaders } from 'node:http'
import { Readable } from 'node:stream'
import type { DigestAlgorithm, DigestFieldName, VerifiedDigest } from './types.js'
import type { Algorithm } from './algorithms.js'
import { integrityFields, judgeFields, type Expectation } from './fields.js'
import { missingField, type Finding, type MismatchedValue } from './findings.js'
import type { Settings } from './options.js'
import { problemFor, type DigestProblem } from './problems.js'
import type { UnencodedHasher } from './unencoded.js'

/** The digests calculated over the content: of the bytes received, and of the decoded content. */
export interface Digests {
  readonly received: ReadonlyMap<Algorithm, Buffer>
  /** null when Unencoded-Digest is checked against the bytes received (no content coding). */
  readonly unencoded: ReadonlyMap<Algorithm, Buffer> | null
}

/**
 * Checks every expected value against the digest calculated for its algorithm and returns what was
 * verified, or every finding: a mismatch, or a value whose algorithm was not hashed (a trailer field
 * that named one nothing announced).
 */
export function compareDigests (expectations: readonly Expectation[], digests: Digests): VerifiedDigest | Finding[] {
  const fields: DigestFieldName[] = []
  const values: Partial<Record<DigestAlgorithm, Buffer>> = {}
  const unencoded: Partial<Record<DigestAlgorithm, Buffer>> = {}
  const mismatched: MismatchedValue[] = []
  for (const { field, header, algorithm, value } of expectations) {
    const decoded = field === 'unencoded-digest' && digests.unencoded !== null
    const digest = (decoded ? digests.unencoded as ReadonlyMap<Algorithm, Buffer> : digests.received).get(algorithm)
    if (digest === undefined) {
      return [{ kind: 'general', detail: `${header} in the trailer section names ${algorithm.key}, which the content was not hashed with: announce the field in Trailer` }]
    }
    // Equal lengths are guaranteed by judgeFields; timingSafeEqual reads every byte, so the time
    // taken tells nothing about how much of a guessed digest was right.
    if (!timingSafeEqual(digest, value)) {
      mismatched.push({ kind: 'mismatched', algorithm: algorithm.key, header, provided: value, calculated: digest })
      continue
    }
    if (!fields.includes(field)) fields.push(field)
    ;(field === 'unencoded-digest' ? unencoded : values)[algorithm.key] = digest
  }
  return mismatched.length > 0 ? mismatched : { fields, values, unencoded }
}

/** Content whose verdict may still be pending when a later hook or the reply needs it. */
export interface PendingContent {
  readonly settled: boolean
  /**
   * Calls `callback` once the content is verified, with the problem if it is not; the rest of the
   * content is read to its end (see readToEnd), letting its readers go with `takeOver`.
   */
  whenSettled (callback: (problem?: DigestProblem) => void, takeOver: boolean): void
}

/** What the verifier needs to know about a request, and what it tells the plugin. */
export interface Verification {
  readonly settings: Settings
  /** The values of the header section's integrity fields. */
  readonly expectations: readonly Expectation[]
  /** The algorithms the bytes received are hashed with, each once. */
  readonly algorithms: readonly Algorithm[]
  /** Hashes the decoded content, when Unencoded-Digest is checked and a content coding applies. */
  readonly unencoded: UnencodedHasher | null
  /** Whether Content-Range makes the request partial (its Repr-Digest is not compared). */
  readonly partial: boolean
  /** Whether a content coding applies, which an Unencoded-Digest must be checked without. */
  readonly coded: boolean
  /** A multipart body's close delimiter, after which everything is held until the verdict. */
  readonly closeDelimiter: Buffer | null
  /** Receives what was verified, just before the content ends for its readers. */
  verified (digest: VerifiedDigest): void
  /**
   * Told of a failure once the content's readers have been given the problem in place of the end;
   * `heard` says whether any of them listens for 'error' and so can answer it.
   */
  failed (problem: DigestProblem, heard: boolean): void
}

const kVerifier = Symbol('fastify-digest-fields.source-verifier')

// The request stream as Node's HTTP/1 parser, its HTTP/2 compatibility layer and light-my-request
// feed it: each calls the stream's own push() for every chunk and push(null) at the end, after
// setting the trailer section, if any.
type Source = Readable & {
  [kVerifier]?: SourceVerifier | undefined
  trailers?: IncomingHttpHeaders
  _readableState: { buffer: Array<Buffer | null>, bufferIndex: number, ended: boolean, pipes: unknown[] }
}

const nothing = Buffer.alloc(0)

function discard (): void {}

function refuseEnd (): boolean {
  return false
}

// The bytes held back from readers until the content is verified: more than any multipart close
// delimiter (RFC 2046 section 5.1.1: a boundary has at most 70 characters), so that not even the
// last part of a multipart body ends before its digest is known.
const tailLength = 1024

// What may follow a multipart body's close delimiter (an epilogue, RFC 2046 section 5.1.1, which
// readers ignore) while it is held: content with more is refused, and the rest not kept.
const maxEpilogue = 64 * 1024

// Installed on the request stream in place of its push(): shared by every request, so no closure is
// made per request; the verifier is found on the stream.
function pushThroughVerifier (this: Source, chunk: Buffer | string | null): boolean {
  return (this[kVerifier] as SourceVerifier).receive(chunk)
}

// Installed in place of its _read() while content is decoded on the side: a reader asking for more
// (which resumes the connection) waits while the decoder's input is full.
function readThroughVerifier (this: Source, size: number): void {
  (this[kVerifier] as SourceVerifier).read(size)
}

// A Readable's 'error' reaches only listeners, as IncomingMessage's does: a reader without one sees
// neither an end nor an uncaught exception. Destroying without the request's own _destroy also
// keeps the connection, whose message is complete, so that the 400 can still be sent.
function destroyQuietly (this: Readable, error: Error | null, callback: (error?: Error | null) => void): void {
  callback(this.listenerCount('error') > 0 ? error : null)
}

/** Gives readers the problem in place of the end; returns whether any of them listens for it. */
export function failSource (source: Readable, problem: DigestProblem): boolean {
  // inject()'s request (light-my-request) ignores a destroy once its payload is pushed, and takes
  // an error on a destroyed request for a broken response: it is given the error alone, heard only
  // by listeners besides its own. Nor may it end later: it pushes an end on every read once done.
  if ('_lightMyRequest' in source) {
    source.push = refuseEnd
    const heard = source.listenerCount('error') > 1
    if (heard) source.emit('error', problem)
    return heard
  }
  const heard = source.listenerCount('error') > 0
  source._destroy = destroyQuietly
  Readable.prototype.destroy.call(source, problem)
  return heard
}

/**
 * Makes a request's content flow to its end, as Node dumps a request nobody reads. Readers that
 * stopped are let go when `takeOver` says so, and when they hold the stream paused without a pipe
 * (a pipe paused by backpressure resumes by itself): a paused reader or a 'readable' listener
 * would otherwise hold the end, and the verdict, back for ever.
 */
export function readToEnd (source: Readable, takeOver: boolean): void {
  if (takeOver || (source.readableFlowing === false && (source as Source)._readableState.pipes.length === 0)) {
    source.removeAllListeners('readable')
    source.removeAllListeners('data')
  }
  if (source.listenerCount('data') + source.listenerCount('readable') === 0) {
    source.on('data', discard)
    source.resume()
  }
}

/** Whether a trailer section carries an integrity field. */
export function hasIntegrityTrailer (trailers: IncomingHttpHeaders | undefined): boolean {
  return trailers !== undefined && integrityFields.some((field) => trailers[field] !== undefined)
}

/**
 * Verifies the content at its source: every chunk the connection delivers to the request stream
 * (request.raw) is hashed before any reader can see it, and the end of the stream is let through
 * only once the digests match, those of the header section and any of the trailer section. On a
 * failure the stream is destroyed with the problem instead, so every way of reading the content
 * (Fastify's parsers, a parser that hands the payload on, request.raw, @fastify/multipart) sees an
 * error in place of the end.
 *
 * The last kilobyte received is held back until more arrives or the content ends: a reader that
 * knows where the content ends from its own framing (a multipart boundary, a JSON value, a length)
 * then never holds all of it before it is verified.
 */
export class SourceVerifier implements PendingContent {
  settled = false
  readonly #source: Source
  readonly #push: (chunk: Buffer | null) => boolean
  readonly #read: (size: number) => void
  readonly #verification: Verification
  // While null, the held chunk (if any) is the first and is not hashed yet: content that arrives in
  // one chunk is hashed in one call at its end, without setting up a Hash. Every other chunk is
  // hashed as it arrives, before any reader can see it.
  #hashes: Hash[] | null = null
  #held: Buffer[] = []
  #heldLength = 0
  #whenSettled: ((problem?: DigestProblem) => void) | null = null
  #ending = false
  // The last bytes scanned for the close delimiter (a copy: readers may change theirs); once it was
  // seen, what is held from it on, and how many bytes came after its end.
  #scanned: Buffer = nothing
  #closing: Buffer[] | null = null
  #afterClose: number | null = null

  constructor (source: Readable, verification: Verification) {
    this.#source = source as Source
    this.#push = source.push
    this.#read = source._read
    this.#verification = verification
  }

  /**
   * Hashes what the stream buffered before the plugin's hook ran (an asynchronous hook before it
   * lets the connection deliver content unread). Returns true when that was the whole content,
   * which judge() then decides; otherwise attach() takes over the rest.
   */
  hashBuffered (): boolean {
    const state = this.#source._readableState
    for (let i = state.bufferIndex; i < state.buffer.length; i++) this.#update(state.buffer[i] as Buffer)
    return state.ended
  }

  /** Takes over the stream's push(), through which the connection delivers every further chunk. */
  attach (): void {
    this.#source[kVerifier] = this
    this.#source.push = pushThroughVerifier
    if (this.#verification.unencoded !== null) this.#source._read = readThroughVerifier
  }

  read (size: number): void {
    // Once the end has arrived (HTTP/2 pushes it when the stream closes) nothing is left to read.
    (this.#verification.unencoded as UnencodedHasher).whenDrained(() => {
      if (!this.#ending) this.#read.call(this.#source, size)
    })
  }

  whenSettled (callback: (problem?: DigestProblem) => void, takeOver: boolean): void {
    this.#whenSettled = callback
    readToEnd(this.#source, takeOver)
  }

  receive (chunk: Buffer | string | null): boolean {
    if (chunk === null) {
      // Until the verdict, which may wait for decoding, a second end (light-my-request pushes one
      // on every read once done) is swallowed like the first.
      if (!this.#ending) {
        this.#ending = true
        this.judge((problem) => this.#conclude(problem))
      }
      return false
    }
    // light-my-request pushes a string payload as it was given.
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
    const held = this.#held
    if (this.#hashes !== null) {
      this.#update(bytes)
    } else if (held.length > 0) {
      this.#update(held[0] as Buffer)
      this.#update(bytes)
    }
    if (this.#closing !== null) return this.#holdAfterClose(bytes)
    const delimiter = this.#verification.closeDelimiter
    const start = delimiter === null ? null : this.#closeDelimiterStart(bytes, delimiter)
    if (start === null) return this.#hold(bytes)
    // The chunk is split at the delimiter: what comes before it is held back as any other chunk,
    // the rest until the verdict. A first chunk, not hashed yet, is hashed whole now.
    if (this.#hashes === null) this.#update(bytes)
    this.#closing = []
    this.#afterClose = -(start + (delimiter as Buffer).length)
    const more = this.#hold(bytes.subarray(0, Math.max(0, start)))
    this.#holdAfterClose(bytes.subarray(Math.max(0, start)))
    return more
  }

  /** Holds back the last kilobyte received, delivering what came before it. */
  #hold (bytes: Buffer): boolean {
    const held = this.#held
    held.push(bytes)
    this.#heldLength += bytes.length
    let more = true
    let delivered = false
    while (this.#heldLength - (held[0] as Buffer).length >= tailLength) {
      const next = held.shift() as Buffer
      this.#heldLength -= next.length
      more = this.#push.call(this.#source, next)
      delivered = true
    }
    // A push that hands nothing on still ends the stream's read, so that it asks for more.
    return this.#wantsMore(delivered ? more : this.#push.call(this.#source, nothing))
  }

  // A full decoder pauses the connection (Node's HTTP/1 parser and HTTP/2 layer stop on false).
  #wantsMore (pushed: boolean): boolean {
    return pushed && this.#verification.unencoded?.full !== true
  }

  // After a multipart body's close delimiter its last part would end for a reader, however long an
  // epilogue follows: nothing from the delimiter on is delivered until the verdict, and past the
  // bound nothing more is kept, since the content is refused at its end.
  #holdAfterClose (bytes: Buffer): boolean {
    const closing = this.#closing as Buffer[]
    this.#afterClose = (this.#afterClose as number) + bytes.length
    if (this.#afterClose > maxEpilogue) closing.length = 0
    else closing.push(bytes)
    return this.#wantsMore(this.#push.call(this.#source, nothing))
  }

  // Where in the chunk the delimiter starts (below 0 when it began in the bytes before it), or
  // null; keeps a copy of the chunk's last bytes for the next search.
  #closeDelimiterStart (bytes: Buffer, delimiter: Buffer): number | null {
    const before = this.#scanned
    const edge = Buffer.concat([before, bytes.subarray(0, delimiter.length - 1)]).indexOf(delimiter)
    if (edge !== -1) return edge - before.length
    const within = bytes.indexOf(delimiter)
    if (within !== -1) return within
    const last = Buffer.concat([before, bytes.subarray(-(delimiter.length - 1))])
    this.#scanned = last.subarray(Math.max(0, last.length - (delimiter.length - 1)))
    return null
  }

  #update (chunk: Buffer): void {
    this.#hashes ??= this.#verification.algorithms.map((algorithm) => algorithm.createHash())
    for (const hash of this.#hashes) hash.update(chunk)
    this.#verification.unencoded?.write(chunk)
  }

  #received (): Map<Algorithm, Buffer> {
    const { algorithms, unencoded } = this.#verification
    const hashes = this.#hashes
    const only = this.#held[0]
    // The one chunk goes to the decoder now, at the end, like every other chunk before it is seen.
    if (hashes === null && only !== undefined) unencoded?.write(only)
    return new Map(algorithms.map((algorithm, i) => [algorithm, hashes !== null
      ? (hashes[i] as Hash).digest()
      : only === undefined ? algorithm.emptyDigest : algorithm.digest(only)]))
  }

  /**
   * Settles the verification once the content is complete: the trailer section's integrity fields
   * are judged, the digests compared, and `callback` gets the problem, or nothing once the plugin
   * was told what was verified. Synchronous unless a content coding has to be removed.
   */
  judge (callback: (problem: DigestProblem | null) => void): void {
    const verification = this.#verification
    const received = this.#received()
    this.settled = true
    this.#hashes = null
    const decide = (unencoded: Map<Algorithm, Buffer> | Finding | null): void => {
      const verdict = this.#verdict(received, unencoded)
      if (Array.isArray(verdict)) {
        callback(problemFor(verification.settings, verdict))
        return
      }
      if (verdict.fields.length > 0) verification.verified(verdict)
      callback(null)
    }
    if (verification.unencoded === null) decide(null)
    else verification.unencoded.end(decide)
  }

  #verdict (received: Map<Algorithm, Buffer>, unencoded: Map<Algorithm, Buffer> | Finding | null): VerifiedDigest | Finding[] {
    const { settings, expectations, partial, coded } = this.#verification
    let all = expectations
    const trailers = this.#source.trailers
    if (hasIntegrityTrailer(trailers)) {
      // RFC 9530 sections 2 and 3: the trailer section's fields are judged like the header
      // section's, with the same problem types.
      const judgement = judgeFields(trailers as IncomingHttpHeaders, settings, partial)
      if (judgement.findings.length > 0) return [...judgement.findings]
      // Coded content was decoded only for a field the header section named or announced.
      if (coded && this.#verification.unencoded === null && judgement.expectations.some(({ field }) => field === 'unencoded-digest')) {
        return [{ kind: 'general', detail: 'Unencoded-Digest in the trailer section cannot be verified: the content was not decoded for it; announce it in a Trailer field' }]
      }
      all = [...expectations, ...judgement.expectations]
    }
    if (unencoded !== null && !(unencoded instanceof Map)) return [unencoded]
    if ((this.#afterClose ?? 0) > maxEpilogue) {
      return [{ kind: 'general', detail: `the content cannot be verified: more than ${maxEpilogue} bytes follow its multipart close delimiter` }]
    }
    // A field announced in Trailer but never sent leaves nothing checked, which `required` refuses.
    if (all.length === 0 && settings.required) return [missingField(settings.algorithms.keys())]
    return compareDigests(all, { received, unencoded })
  }

  #conclude (problem: DigestProblem | null): void {
    const source = this.#source
    source.push = this.#push
    source._read = this.#read
    source[kVerifier] = undefined
    const held = [...this.#held, ...this.#closing ?? []]
    const whenSettled = this.#whenSettled
    this.#held = []
    this.#closing = null
    this.#whenSettled = null
    if (problem !== null) {
      const heard = failSource(source, problem)
      if (whenSettled !== null) whenSettled(problem)
      else this.#verification.failed(problem, heard)
      return
    }
    for (const chunk of held) this.#push.call(source, chunk)
    this.#push.call(source, null)
    whenSettled?.()
  }
}
