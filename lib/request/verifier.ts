/**
 * The verification of a request's content at its source: taken over as it arrives, hashed before
 * any reader sees it, held back in part until the verdict, then ended or failed for every reader.
 */
import type { Readable } from 'node:stream'
import type { DigestProblem } from '../problems/problems.js'
import type { UnencodedHasher } from '../fields/unencoded.js'
import { HeldContent } from '../fields/held-content.js'
import { answerUnheard } from '../problems/answer.js'
import { kSourceVerifier } from '../symbols.js'
import { ContentHashes } from './content-hashes.js'
import { PendingContent } from './pending-content.js'
import { giveBackPush, isCutShort, takeOverPush, type Source } from './source.js'
import { judgeContent, type Verification } from './verdict.js'

type VerifiedSource = Source & { [kSourceVerifier]?: SourceVerifier | undefined }

const nothing = Buffer.alloc(0)

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
export class SourceVerifier extends PendingContent {
  readonly covered = true
  readonly #push: (chunk: Buffer | null) => boolean
  readonly #read: (size: number) => void
  readonly #verification: Verification
  readonly #hashes: ContentHashes
  readonly #held: HeldContent
  #ending = false

  constructor (source: Readable, verification: Verification) {
    super(source as Source)
    this.#push = source.push
    this.#read = source._read
    this.#verification = verification
    this.#hashes = new ContentHashes(verification.algorithms, verification.unencoded, verification.upload)
    this.#held = new HeldContent(verification.closeDelimiter, verification.length)
  }

  protected stallTimeout (): number {
    return this.#verification.settings.stallTimeout
  }

  /**
   * Takes what the stream buffered before the plugin's hook ran (an asynchronous hook before it lets
   * the connection deliver content unread), unread yet: when that was all of it, hashes it and gives
   * true; else takes it back through receive(), held as any chunk, and attach() takes the rest.
   */
  takeBuffered (): boolean {
    const state = this.source._readableState
    if (state.ended) {
      for (let i = state.bufferIndex; i < state.buffer.length; i++) this.#hashes.hash(state.buffer[i] as Buffer)
      return true
    }
    for (const chunk of state.buffer.splice(state.bufferIndex) as Buffer[]) {
      state.length -= chunk.length
      this.receive(chunk)
    }
    return false
  }

  /** Takes over the stream's push(), through which the connection delivers every further chunk. */
  attach (): void {
    takeOverPush(this.source, this)
    if (this.#verification.unencoded !== null) this.source._read = readThroughVerifier
  }

  detach (): void {
    giveBackPush(this.source, this.#push)
    this.source._read = this.#read
  }

  read (size: number): void {
    // Once the end has arrived (HTTP/2 pushes it when the stream closes) nothing is left to read.
    (this.#verification.unencoded as UnencodedHasher).whenDrained(() => {
      if (!this.#ending) this.#read.call(this.source, size)
    })
  }

  receive (chunk: Buffer | string | null): boolean {
    if (chunk === null) {
      // Until the verdict, which may wait for decoding, a second end (light-my-request pushes one
      // on every read once done) is swallowed like the first.
      if (!this.#ending) {
        this.#ending = true
        if (isCutShort(this.source)) this.abort()
        else this.judge((problem) => this.#conclude(problem))
      }
      return false
    }
    // light-my-request pushes a string payload as it was given.
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
    this.arrived()
    const releasable = this.#held.releasable
    if (releasable > 0) this.#hashes.hash(bytes, releasable)
    else this.#hashes.add(bytes)
    // A push that hands nothing on still ends the stream's read, so that it asks for more. A full
    // decoder pauses the connection (Node's HTTP/1 parser and HTTP/2 layer stop on false).
    const more = this.#held.take(bytes, this.#push, this.source) ?? this.#push.call(this.source, nothing)
    return more && this.#verification.unencoded?.full !== true
  }

  /**
   * Once the content is complete: the trailer section judged, the digests compared, and `callback`
   * given the problem or null. Synchronous unless a content coding has to be removed.
   */
  judge (callback: (problem: DigestProblem | null) => void): void {
    judgeContent(this.#verification, this.#hashes.digests(), this.source, this.#held, callback)
  }

  #conclude (problem: DigestProblem | null): void {
    this.detach()
    const held = this.#held.release()
    if (problem !== null) {
      const { request, reply } = this.#verification
      this.concludeFailed(problem, (heard) => answerUnheard(problem, heard, request, reply))
      return
    }
    this.concludeVerified(held, this.#push)
  }
}
