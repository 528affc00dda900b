import type { Hash } from 'node:crypto'
import { finished, type Transform } from 'node:stream'
import * as zlib from 'node:zlib'
import type { Algorithm } from './algorithms.js'
import type { GeneralFinding } from './findings.js'

// The content codings this plugin can remove (RFC 9110 section 8.4.1; zstd, RFC 8878, where the
// running Node has it). x-gzip is gzip (RFC 9110 section 8.4.1.3).
const decoders: ReadonlyMap<string, () => Transform> = new Map([
  ['gzip', zlib.createGunzip],
  ['x-gzip', zlib.createGunzip],
  ['deflate', zlib.createInflate],
  ['br', zlib.createBrotliDecompress],
  ...Object.entries({ zstd: (zlib as { createZstdDecompress?: () => Transform }).createZstdDecompress })
    .filter((entry): entry is [string, () => Transform] => typeof entry[1] === 'function')
])

// More codings than anyone applies would only make the server set up decoders for nothing.
const maxCodings = 4

/**
 * The content codings of a request, in the order they were applied, without identity; or the
 * finding that they cannot be removed, which makes Unencoded-Digest unverifiable.
 */
export function contentCodings (contentEncoding: string | undefined): string[] | GeneralFinding {
  if (contentEncoding === undefined) return []
  const codings = contentEncoding.toLowerCase().split(',').map((coding) => coding.trim()).filter((coding) => coding !== '' && coding !== 'identity')
  if (codings.length > maxCodings) {
    return { kind: 'general', detail: `Unencoded-Digest cannot be verified: this server removes at most ${maxCodings} content codings` }
  }
  const unknown = codings.find((coding) => !decoders.has(coding))
  if (unknown === undefined) return codings
  return { kind: 'general', detail: `Unencoded-Digest cannot be verified: this server cannot remove the content coding ${unknown}` }
}

/**
 * Hashes the content with every content coding removed, for Unencoded-Digest: the received chunks
 * are decoded on the side, in the reverse of the order the codings were applied, and nothing
 * decoded is kept. At most `limit` decoded bytes are produced, so a small compressed bomb cannot
 * make the server decode gigabytes.
 */
export class UnencodedHasher {
  readonly #chain: readonly Transform[]
  readonly #first: Transform
  readonly #last: Transform
  readonly #algorithms: readonly Algorithm[]
  readonly #hashes: Hash[]
  readonly #limit: number
  #finding: GeneralFinding | null = null

  constructor (codings: readonly string[], algorithms: readonly Algorithm[], limit: number) {
    const chain = codings.toReversed().map((coding) => (decoders.get(coding) as () => Transform)())
    for (let i = 1; i < chain.length; i++) (chain[i - 1] as Transform).pipe(chain[i] as Transform)
    this.#chain = chain
    this.#first = chain[0] as Transform
    this.#last = chain[chain.length - 1] as Transform
    this.#algorithms = algorithms
    this.#hashes = algorithms.map((algorithm) => algorithm.createHash())
    this.#limit = limit
    for (const decoder of chain) {
      decoder.on('error', (error: Error) => this.#fail(`the content does not decode: ${error.message}`))
      // Every stage is bounded, not only the last: a decoder ignores bytes after the end of its
      // stream, so an inner stage could decode gigabytes that never reach the last.
      let decoded = 0
      decoder.on('data', (chunk: Buffer) => {
        decoded += chunk.length
        if (decoded > this.#limit) this.#fail(`the content decodes to more than ${this.#limit} bytes`, 413)
      })
    }
    this.#last.on('data', (chunk: Buffer) => {
      if (this.#finding === null) for (const hash of this.#hashes) hash.update(chunk)
    })
  }

  write (chunk: Buffer): void {
    if (this.#finding === null) this.#first.write(chunk)
  }

  /** Ends the decoding, then gives the digests of the decoded content, or why there are none. */
  end (callback: (result: Map<Algorithm, Buffer> | GeneralFinding) => void): void {
    // finished() also answers for a chain a failure destroyed already.
    finished(this.#last, () => callback(this.#finding ?? new Map(this.#algorithms.map((algorithm, i) => [algorithm, (this.#hashes[i] as Hash).digest()]))))
    this.#first.end()
  }

  // Called once at most: a destroyed chain emits nothing more, and nothing is written to it.
  #fail (reason: string, status = 400): void {
    this.#finding = { kind: 'general', detail: `Unencoded-Digest cannot be verified: ${reason}`, status }
    for (const decoder of this.#chain) decoder.destroy()
  }
}
