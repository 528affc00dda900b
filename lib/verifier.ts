import { timingSafeEqual, type Hash } from 'node:crypto'
import { Readable } from 'node:stream'
import type { DigestAlgorithm, DigestFieldName, VerifiedDigest } from '../types/index.js'
import type { Algorithm } from './algorithms.js'
import type { Expectation } from './fields.js'
import type { Settings } from './options.js'
import { mismatchingValue, type DigestProblem } from './problems.js'

/**
 * Checks every expected value against the digest calculated for its algorithm and returns what was
 * verified; throws the mismatching-value problem of the first value that differs.
 */
export function compareDigests (
  settings: Settings,
  expectations: readonly Expectation[],
  algorithms: readonly Algorithm[],
  digests: readonly Buffer[]
): VerifiedDigest {
  const fields: DigestFieldName[] = []
  const values: Partial<Record<DigestAlgorithm, Buffer>> = {}
  for (const { field, algorithm, value } of expectations) {
    const digest = digests[algorithms.indexOf(algorithm)] as Buffer
    // Equal lengths are guaranteed by inspectFields; timingSafeEqual reads every byte, so the time
    // taken tells nothing about how much of a guessed digest was right.
    if (!timingSafeEqual(digest, value)) throw mismatchingValue(settings, algorithm.key, value, digest)
    if (!fields.includes(field)) fields.push(field)
    values[algorithm.key] = digest
  }
  return { fields, values }
}

/** What the verifier needs to know about a request, and what it tells the plugin. */
export interface Verdicts {
  readonly settings: Settings
  readonly expectations: readonly Expectation[]
  /** The distinct algorithms of `expectations`, each hashed once. */
  readonly algorithms: readonly Algorithm[]
  /** Receives what was verified, just before the content ends for its readers. */
  verified (digest: VerifiedDigest): void
  /**
   * Told of a mismatch once the content's readers have been given the problem in place of the end;
   * `heard` says whether any of them listens for 'error' and so can answer it.
   */
  failed (problem: DigestProblem, heard: boolean): void
}

const kVerifier = Symbol('fastify-digest-fields.source-verifier')

// The request stream as Node's HTTP/1 parser, its HTTP/2 compatibility layer and light-my-request
// feed it: each calls the stream's own push() for every chunk and push(null) at the end.
type Source = Readable & {
  [kVerifier]?: SourceVerifier | undefined
  _readableState: { buffer: Array<Buffer | null>, bufferIndex: number, ended: boolean }
}

const nothing = Buffer.alloc(0)

// The bytes held back from readers until the content is verified: more than any multipart close
// delimiter (RFC 2046 section 5.1.1: a boundary has at most 70 characters), so that not even the
// last part of a multipart body ends before its digest is known.
const tailLength = 1024

// Installed on the request stream in place of its push(): shared by every request, so no closure is
// made per request; the verifier is found on the stream.
function pushThroughVerifier (this: Source, chunk: Buffer | string | null): boolean {
  return (this[kVerifier] as SourceVerifier).receive(chunk)
}

// A Readable's 'error' reaches only listeners, as IncomingMessage's does: a reader without one sees
// neither an end nor an uncaught exception. Destroying without the request's own _destroy also
// keeps the connection, whose message is complete, so that the 400 can still be sent.
function destroyQuietly (this: Readable, error: Error | null, callback: (error?: Error | null) => void): void {
  callback(this.listenerCount('error') > 0 ? error : null)
}

/**
 * Verifies the content at its source: every chunk the connection delivers to the request stream
 * (request.raw) is hashed before any reader can see it, and the end of the stream is let through
 * only once the digests match. On a mismatch the stream is destroyed with the problem instead, so
 * every way of reading the content (Fastify's parsers, a parser that hands the payload on,
 * request.raw, @fastify/multipart) sees an error in place of the end.
 *
 * The last kilobyte received is held back until more arrives or the content ends: a reader that
 * knows where the content ends from its own framing (a multipart boundary, a JSON value, a length)
 * then never holds all of it before it is verified.
 */
export class SourceVerifier {
  settled = false
  readonly #source: Source
  readonly #push: (chunk: Buffer | null) => boolean
  readonly #verdicts: Verdicts
  // While null, the held chunk (if any) is the first and is not hashed yet: content that arrives in
  // one chunk is hashed in one call at its end, without setting up a Hash. Every other chunk is
  // hashed as it arrives, before any reader can see it.
  #hashes: Hash[] | null = null
  #held: Buffer[] = []
  #heldLength = 0
  #whenSettled: ((problem?: DigestProblem) => void) | null = null

  constructor (source: Readable, verdicts: Verdicts) {
    this.#source = source as Source
    this.#push = source.push
    this.#verdicts = verdicts
  }

  /**
   * Hashes what the stream buffered before the plugin's hook ran (an asynchronous hook before it
   * lets the connection deliver content unread). Returns true when that was the whole content,
   * which judge() then decides at once; otherwise attach() takes over the rest.
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
  }

  /**
   * Called before the handler when a reader took some content and stopped without handing a stream
   * on (a parser that sniffs the first chunk): the rest is read and discarded here, and `callback`
   * runs once the content is verified, with the problem if it is not.
   */
  finish (callback: (problem?: DigestProblem) => void): void {
    this.#whenSettled = callback
    this.#source.resume()
  }

  receive (chunk: Buffer | string | null): boolean {
    if (chunk === null) return this.#conclude()
    // light-my-request pushes a string payload as it was given.
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
    const held = this.#held
    if (this.#hashes !== null) {
      this.#update(bytes)
    } else if (held.length > 0) {
      this.#update(held[0] as Buffer)
      this.#update(bytes)
    }
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
    return delivered ? more : this.#push.call(this.#source, nothing)
  }

  #update (chunk: Buffer): void {
    this.#hashes ??= this.#verdicts.algorithms.map((algorithm) => algorithm.createHash())
    for (const hash of this.#hashes) hash.update(chunk)
  }

  #digests (): Buffer[] {
    const { algorithms } = this.#verdicts
    if (this.#hashes !== null) return this.#hashes.map((hash) => hash.digest())
    const only = this.#held[0]
    return algorithms.map((algorithm) => only === undefined ? algorithm.emptyDigest : algorithm.digest(only))
  }

  /**
   * Settles the verification: tells the plugin what was verified and returns null, or returns the
   * mismatching-value problem. Called directly for content that was complete before any reader
   * started, and at the end of the content otherwise.
   */
  judge (): DigestProblem | null {
    const verdicts = this.#verdicts
    const digests = this.#digests()
    this.settled = true
    this.#hashes = null
    try {
      verdicts.verified(compareDigests(verdicts.settings, verdicts.expectations, verdicts.algorithms, digests))
      return null
    } catch (problem) {
      return problem as DigestProblem
    }
  }

  #conclude (): boolean {
    const source = this.#source
    const held = this.#held
    const problem = this.judge()
    const whenSettled = this.#whenSettled
    this.#held = []
    this.#whenSettled = null
    source.push = this.#push
    source[kVerifier] = undefined
    if (problem !== null) {
      const heard = source.listenerCount('error') > 0
      source._destroy = destroyQuietly
      Readable.prototype.destroy.call(source, problem)
      if (whenSettled !== null) whenSettled(problem)
      else this.#verdicts.failed(problem, heard)
      return false
    }
    for (const chunk of held) this.#push.call(source, chunk)
    const more = this.#push.call(source, null)
    whenSettled?.()
    return more
  }
}
