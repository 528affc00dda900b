/**
 * The verification of a request's content at its source: taken over as it arrives, hashed before
 * any reader sees it, held back in part until the verdict, then ended or failed for every reader.
 */
import type { Readable } from 'node:stream'
import type { DigestProblem } from '../problems/problems.js'
import type { UnencodedHasher } from '../fields/unencoded.js'
import { ContentHashes } from './content-hashes.js'
import { HeldContent } from '../fields/held-content.js'
import { closeRequest, failSource, type Source } from './source.js'
import { aborted, ContentWait, type Release, type Waiter } from './content-wait.js'
import { kSourceVerifier } from '../symbols.js'
import { judgeContent, type Verification } from './verdict.js'

/** Content whose verdict may still be pending when a later hook, the handler or the reply needs it. */
export interface PendingContent {
  /** Whether the content concluded: verified, failed or cut short. */
  readonly settled: boolean
  /** Whether the route is one the plugin verifies (a trailer watch also sees routes with digest: false). */
  readonly covered: boolean
  /** Why the content failed (its DigestProblem) or was cut short, once it concluded; else null. */
  readonly failure: Error | null
  /**
   * Tells `waiter` once the content concluded; the rest is read to its end by its readers, or by
   * the plugin (ContentWait), which lets readers go as `release` says. Without a waiter, only
   * bounds the wait of a reader of the content.
   */
  whenSettled (waiter: Waiter | null, release: Release): void
}

type VerifiedSource = Source & { [kSourceVerifier]?: SourceVerifier | undefined }

const nothing = Buffer.alloc(0)

// Installed on the request stream in place of its push(): shared by every request, so no closure is
// made per request; the verifier is found on the stream.
function pushThroughVerifier (this: VerifiedSource, chunk: Buffer | string | null): boolean {
  return (this[kSourceVerifier] as SourceVerifier).receive(chunk)
}

// Installed in place of its _read() while content is decoded on the side: a reader asking for more
// (which resumes the connection) waits while the decoder's input is full.
function readThroughVerifier (this: VerifiedSource, size: number): void {
  (this[kSourceVerifier] as SourceVerifier).read(size)
}

/**
 * Verifies the content at its source: every chunk the connection delivers to the request stream
 * (request.raw) is hashed before any reader can see it, and the end of the stream is let through
 * only once the digests match, those of the header section and any of the trailer section. On a
 * failure the stream is destroyed with the problem instead, so every way of reading the content
 * (Fastify's parsers, a parser that hands the payload on, request.raw, @fastify/multipart) sees an
 * error in place of the end.
 */
export class SourceVerifier implements PendingContent {
  readonly covered = true
  settled = false
  failure: Error | null = null
  readonly #source: VerifiedSource
  readonly #push: (chunk: Buffer | null) => boolean
  readonly #read: (size: number) => void
  readonly #verification: Verification
  readonly #hashes: ContentHashes
  readonly #held: HeldContent
  // Made when something waits for the verdict: most requests never need one.
  #wait: ContentWait | null = null
  #ending = false
  // What the held content hands on goes to the stream's own push(): one function a request.
  readonly #deliver = (chunk: Buffer): boolean => this.#push.call(this.#source, chunk)

  constructor (source: Readable, verification: Verification) {
    this.#source = source as VerifiedSource
    this.#push = source.push
    this.#read = source._read
    this.#verification = verification
    this.#hashes = new ContentHashes(verification.algorithms, verification.unencoded, verification.upload)
    this.#held = new HeldContent(verification.closeDelimiter)
  }

  /**
   * Hashes what the stream buffered before the plugin's hook ran (an asynchronous hook before it
   * lets the connection deliver content unread). Returns true when that was the whole content,
   * which judge() then decides; otherwise attach() takes over the rest.
   */
  hashBuffered (): boolean {
    const state = this.#source._readableState
    for (let i = state.bufferIndex; i < state.buffer.length; i++) this.#hashes.hash(state.buffer[i] as Buffer)
    return state.ended
  }

  /** Takes over the stream's push(), through which the connection delivers every further chunk. */
  attach (): void {
    this.#source[kSourceVerifier] = this
    this.#source.push = pushThroughVerifier
    if (this.#verification.unencoded !== null) this.#source._read = readThroughVerifier
  }

  read (size: number): void {
    // Once the end has arrived (HTTP/2 pushes it when the stream closes) nothing is left to read.
    (this.#verification.unencoded as UnencodedHasher).whenDrained(() => {
      if (!this.#ending) this.#read.call(this.#source, size)
    })
  }

  whenSettled (waiter: Waiter | null, release: Release): void {
    this.#wait ??= new ContentWait(this.#source, this.#verification.settings.stallTimeout, (error) => this.abort(error, true))
    this.#wait.add(waiter, release)
  }

  receive (chunk: Buffer | string | null): boolean {
    if (chunk === null) {
      // Until the verdict, which may wait for decoding, a second end (light-my-request pushes one
      // on every read once done) is swallowed like the first.
      if (!this.#ending) {
        this.#ending = true
        if (this.cutShort) this.abort()
        else this.judge((problem) => this.#conclude(problem))
      }
      return false
    }
    // light-my-request pushes a string payload as it was given.
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
    if (this.#wait !== null) this.#wait.moved = true
    this.#hashes.add(bytes)
    // A push that hands nothing on still ends the stream's read, so that it asks for more. A full
    // decoder pauses the connection (Node's HTTP/1 parser and HTTP/2 layer stop on false).
    const more = this.#held.take(bytes, this.#deliver) ?? this.#push.call(this.#source, nothing)
    return more && this.#verification.unencoded?.full !== true
  }

  /**
   * Settles the verification once the content is complete: the trailer section's integrity fields
   * are judged, the digests compared, and `callback` gets the problem, or nothing once the plugin
   * was told what was verified. Synchronous unless a content coding has to be removed.
   */
  judge (callback: (problem: DigestProblem | null) => void): void {
    judgeContent(this.#verification, this.#hashes.digests(), this.#source, this.#held, callback)
  }

  /**
   * Whether the content ended because its client left: Node's HTTP/2 compatibility layer ends a
   * request whose stream was reset as if it were complete (onStreamCloseRequest pushes the end
   * after 'aborted').
   */
  get cutShort (): boolean {
    return (this.#source as { aborted?: boolean }).aborted === true
  }

  /**
   * Gives readers of content cut short the error of an aborted HTTP/1.1 request, or `error`, and
   * with `close` ends the request; nothing is judged.
   */
  abort (error = aborted(), close = false): void {
    this.#restore()
    this.#settle(error)
    if (close) closeRequest(this.#source, error)
    else failSource(this.#source, error)
    this.#wait?.settle(error)
  }

  #restore (): void {
    const source = this.#source
    source.push = this.#push
    source._read = this.#read
    source[kSourceVerifier] = undefined
  }

  #settle (failure: Error | null): void {
    this.settled = true
    this.failure = failure
  }

  #conclude (problem: DigestProblem | null): void {
    const source = this.#source
    this.#restore()
    const held = this.#held.release()
    this.#settle(problem)
    if (problem !== null) {
      const heard = failSource(source, problem)
      if (this.#wait?.settle(problem) !== true) this.#verification.failed(problem, heard)
      return
    }
    // Readers a wait let go before the end are told why, rather than seeing an end that looks complete.
    const cut = this.#wait?.cut ?? null
    if (cut !== null) {
      failSource(source, cut)
    } else {
      for (const chunk of held) this.#push.call(source, chunk)
      this.#push.call(source, null)
    }
    this.#wait?.settle(null)
  }
}
