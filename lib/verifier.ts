import { timingSafeEqual, type Hash } from 'node:crypto'
import { Readable } from 'node:stream'
import type { DigestAlgorithm, DigestFieldName, VerifiedDigest } from '../types/index.js'
import type { Algorithm } from './algorithms.js'
import type { Expectation } from './fields.js'
import type { Settings } from './options.js'
import { mismatchingValue } from './problems.js'

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

const kVerifier = Symbol('fastify-digest-fields.verifier')
type Source = Readable & { [kVerifier]?: DigestVerifier | undefined }

/**
 * Passes the request payload through unchanged while hashing it, and ends only once the digests
 * match: on a mismatch it errors instead, so a body parser fails before it hands anything on, and
 * a handler reading the stream itself sees the error in place of the end.
 *
 * It reads its source only when it is read, so a route that never reads its payload stream leaves
 * `started` false, which the plugin takes as content that was not verified.
 */
export class DigestVerifier extends Readable {
  /** Bytes taken from the source; Fastify's body parsers read it to enforce bodyLimit. */
  receivedEncodedLength = 0
  started = false
  settled = false
  readonly #source: Source
  readonly #settings: Settings
  readonly #expectations: readonly Expectation[]
  readonly #algorithms: readonly Algorithm[]
  readonly #target: { digest: VerifiedDigest | null }
  // Most small bodies arrive in one chunk, which a one-shot digest hashes without setting up a
  // Hash; the incremental hashes start with the second chunk.
  #first: Buffer | null = null
  #hashes: Hash[] | null = null

  /**
   * `algorithms` are the distinct algorithms of `expectations`, each hashed once; `target.digest`
   * is set to what was verified just before the stream ends.
   */
  constructor (
    source: Readable,
    settings: Settings,
    expectations: readonly Expectation[],
    algorithms: readonly Algorithm[],
    target: { digest: VerifiedDigest | null }
  ) {
    // At least the socket's read size, so that a large upload is not paused and resumed (each a
    // tick) on every chunk; what waits here is still bounded by this one mark.
    super({ highWaterMark: Math.max(source.readableHighWaterMark, 64 * 1024) })
    this.#source = source
    this.#settings = settings
    this.#expectations = expectations
    this.#algorithms = algorithms
    this.#target = target
  }

  override _read (): void {
    if (!this.started) {
      this.started = true
      // Listeners shared by every verifier, which find theirs on the source: no closures a request.
      this.#source[kVerifier] = this
      this.#source.on('data', DigestVerifier.#onData)
      this.#source.on('end', DigestVerifier.#onEnd)
      this.#source.on('error', DigestVerifier.#onError)
      this.#source.on('close', DigestVerifier.#onClose)
    }
    this.#source.resume()
  }

  override _destroy (error: Error | null, callback: (error?: Error | null) => void): void {
    this.#detach()
    callback(error)
  }

  #detach (): void {
    this.settled = true
    this.#first = null
    this.#hashes = null
    this.#source[kVerifier] = undefined
    this.#source.off('data', DigestVerifier.#onData)
    this.#source.off('end', DigestVerifier.#onEnd)
    this.#source.off('error', DigestVerifier.#onError)
    this.#source.off('close', DigestVerifier.#onClose)
  }

  #update (chunk: Buffer): void {
    this.receivedEncodedLength += chunk.length
    if (this.#hashes !== null) {
      for (const hash of this.#hashes) hash.update(chunk)
    } else if (this.#first === null) {
      this.#first = chunk
    } else {
      const first = this.#first
      this.#first = null
      this.#hashes = this.#algorithms.map((algorithm) => algorithm.createHash().update(first).update(chunk))
    }
    if (!this.push(chunk)) this.#source.pause()
  }

  #digests (): Buffer[] {
    const hashes = this.#hashes
    if (hashes !== null) return hashes.map((hash) => hash.digest())
    const first = this.#first
    return this.#algorithms.map((algorithm) => first === null ? algorithm.emptyDigest : algorithm.digest(first))
  }

  #end (): void {
    const digests = this.#digests()
    this.#detach()
    try {
      this.#target.digest = compareDigests(this.#settings, this.#expectations, this.#algorithms, digests)
    } catch (error) {
      this.destroy(error as Error)
      return
    }
    this.push(null)
  }

  static #onData (this: Source, chunk: Buffer): void {
    (this[kVerifier] as DigestVerifier).#update(chunk)
  }

  static #onEnd (this: Source): void {
    (this[kVerifier] as DigestVerifier).#end()
  }

  static #onError (this: Source, error: Error): void {
    (this[kVerifier] as DigestVerifier).destroy(error)
  }

  // A request that closes without an end was cut off mid-body; the hashes are dropped.
  static #onClose (this: Source): void {
    (this[kVerifier] as DigestVerifier).destroy(new Error('the request was closed before its content was complete'))
  }
}
