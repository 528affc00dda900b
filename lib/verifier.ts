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
  calculated: (algorithm: Algorithm) => Buffer
): VerifiedDigest {
  const fields: DigestFieldName[] = []
  const values: Partial<Record<DigestAlgorithm, Buffer>> = {}
  for (const { field, algorithm, value } of expectations) {
    const digest = calculated(algorithm)
    // Equal lengths are guaranteed by inspectFields; timingSafeEqual reads every byte, so the time
    // taken tells nothing about how much of a guessed digest was right.
    if (!timingSafeEqual(digest, value)) throw mismatchingValue(settings, algorithm.key, value, digest)
    if (!fields.includes(field)) fields.push(field)
    values[algorithm.key] = digest
  }
  return { fields, values }
}

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
  readonly #source: Readable
  readonly #hashes: Array<[Algorithm, Hash]>
  readonly #verify: (calculated: (algorithm: Algorithm) => Buffer) => void

  constructor (
    source: Readable,
    algorithms: Iterable<Algorithm>,
    verify: (calculated: (algorithm: Algorithm) => Buffer) => void
  ) {
    super()
    this.#source = source
    // One hash per distinct algorithm, whichever fields and how often they name it.
    this.#hashes = [...new Set(algorithms)].map(algorithm => [algorithm, algorithm.createHash()])
    this.#verify = verify
  }

  override _read (): void {
    if (!this.started) {
      this.started = true
      this.#source.on('data', this.#onData)
      this.#source.on('end', this.#onEnd)
      this.#source.on('error', this.#onError)
      this.#source.on('close', this.#onClose)
    }
    this.#source.resume()
  }

  override _destroy (error: Error | null, callback: (error?: Error | null) => void): void {
    this.#detach()
    callback(error)
  }

  #detach (): void {
    this.settled = true
    this.#source.off('data', this.#onData)
    this.#source.off('end', this.#onEnd)
    this.#source.off('error', this.#onError)
    this.#source.off('close', this.#onClose)
  }

  readonly #onData = (chunk: Buffer): void => {
    for (const [, hash] of this.#hashes) hash.update(chunk)
    this.receivedEncodedLength += chunk.length
    if (!this.push(chunk)) this.#source.pause()
  }

  readonly #onEnd = (): void => {
    this.#detach()
    const digests = new Map(this.#hashes.map(([algorithm, hash]) => [algorithm, hash.digest()]))
    try {
      this.#verify(algorithm => digests.get(algorithm) as Buffer)
    } catch (error) {
      this.destroy(error as Error)
      return
    }
    this.push(null)
  }

  readonly #onError = (error: Error): void => {
    this.destroy(error)
  }

  // A client that goes away mid-body closes the request without an end; the hashes are dropped.
  readonly #onClose = (): void => {
    this.destroy(new Error('the request was closed before its content was complete'))
  }
}
