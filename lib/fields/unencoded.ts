/** Unencoded-Digest's side decoder: the content codings removed from a copy of the content, which is hashed. */
import type { Hash } from 'node:crypto'
import { finished, type Transform } from 'node:stream'
import * as zlib from 'node:zlib'
import type { Algorithm } from './algorithms.js'
import { refusals, type GeneralFinding } from '../findings.js'
import { listMembers } from './sections.js'

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

type CodingStage = Transform & { bytesWritten: number }

/**
 * The content codings of a request, in the order they were applied, without identity; or the
 * finding that they cannot be removed, which makes Unencoded-Digest unverifiable.
 */
export function contentCodings (contentEncoding: string | undefined): string[] | GeneralFinding {
  if (contentEncoding === undefined) return []
  const codings = listMembers(contentEncoding).filter((coding) => coding !== '' && coding !== 'identity')
  if (codings.length > maxCodings) {
    return refusals.tooManyCodings(maxCodings)
  }
  const unknown = codings.find((coding) => !decoders.has(coding))
  if (unknown === undefined) return codings
  return refusals.unknownCoding(unknown)
}

/**
 * Hashes the content with every content coding removed, for Unencoded-Digest: the received chunks
 * are decoded on the side, in the reverse of the order the codings were applied, and nothing
 * decoded is kept. At most `limit` decoded bytes are produced at any stage, so a small compressed
 * bomb cannot make the server decode gigabytes, and bytes after the end of a coding's stream
 * (which a decoder would ignore) make the content unverifiable.
 *
 * The decoder is given copies, since readers may change their chunks in place before it reads
 * them, and says when its input is full (`write` returns false, `whenDrained` waits), so that the
 * source can be paused rather than the upload queued in memory.
 */
export class UnencodedHasher {
  readonly #codings: readonly string[]
  readonly #chain: readonly Transform[]
  readonly #first: Transform
  readonly #hashes: Hash[]
  readonly #algorithms: readonly Algorithm[]
  // Bytes given to each stage, to compare with what it consumed (zlib's bytesWritten) at the end.
  readonly #given: number[]
  #finding: GeneralFinding | null = null
  #drained: (() => void) | null = null

  constructor (codings: readonly string[], algorithms: readonly Algorithm[], limit: number) {
    this.#codings = codings.toReversed()
    const chain = this.#codings.map((coding) => (decoders.get(coding) as () => Transform)())
    this.#chain = chain
    this.#first = chain[0] as Transform
    this.#algorithms = algorithms
    this.#hashes = algorithms.map((algorithm) => algorithm.createHash())
    this.#given = chain.map(() => 0)
    chain.forEach((decoder, i) => {
      decoder.on('error', (error: Error) => this.#fail(refusals.undecodable(error.message)))
      // Every stage is bounded, not only the last: a decoder ignores bytes after the end of its
      // stream, so an inner stage could decode gigabytes that never reach the last.
      let decoded = 0
      const next = chain[i + 1]
      decoder.on('data', (chunk: Buffer) => {
        decoded += chunk.length
        if (decoded > limit) this.#fail(refusals.decodesPastLimit(limit))
        else if (next === undefined) for (const hash of this.#hashes) hash.update(chunk)
        else this.#given[i + 1] = (this.#given[i + 1] as number) + chunk.length
      })
      if (next !== undefined) decoder.pipe(next)
    })
    this.#first.on('drain', () => this.#release())
  }

  /** Gives the decoder a copy of `chunk`; false when its input is full until `whenDrained`. */
  write (chunk: Buffer): boolean {
    if (this.#finding !== null) return true
    this.#given[0] = (this.#given[0] as number) + chunk.length
    return this.#first.write(Buffer.from(chunk))
  }

  /** Whether the decoder's input is full: the source waits (`whenDrained`) before it reads more. */
  get full (): boolean {
    return this.#finding === null && this.#first.writableNeedDrain
  }

  /** Calls back once the decoder takes input again, or has failed and takes none. */
  whenDrained (callback: () => void): void {
    if (this.full) this.#drained = callback
    else callback()
  }

  /** Ends the decoding, then gives the digests of the decoded content, or why there are none. */
  end (callback: (result: Map<Algorithm, Buffer> | GeneralFinding) => void): void {
    // finished() also answers for a stage a failure destroyed already.
    let pending = this.#chain.length
    for (const stage of this.#chain) {
      finished(stage, () => {
        if (--pending === 0) callback(this.#result())
      })
    }
    this.#first.end()
  }

  #result (): Map<Algorithm, Buffer> | GeneralFinding {
    if (this.#finding !== null) return this.#finding
    // A stage that consumed less than it was given met the end of its coding's stream early.
    const early = this.#chain.findIndex((stage, i) => (stage as CodingStage).bytesWritten !== this.#given[i])
    if (early !== -1) {
      return refusals.bytesAfterCoding(this.#codings[early] as string)
    }
    return new Map(this.#algorithms.map((algorithm, i) => [algorithm, (this.#hashes[i] as Hash).digest()]))
  }

  #release (): void {
    const drained = this.#drained
    this.#drained = null
    drained?.()
  }

  // Called once at most: a destroyed chain emits nothing more, and nothing is written to it.
  #fail (finding: GeneralFinding): void {
    this.#finding = finding
    for (const decoder of this.#chain) decoder.destroy()
    this.#release()
  }
}

/** Takes bytes in and gives their digests, with content codings removed or as they are. */
export interface ContentDigests {
  /** Takes a chunk (copied if it must be kept); the caller waits for `whenDrained` before the next. */
  write (chunk: Buffer): void
  whenDrained (callback: () => void): void
  /** The digests, or null when the bytes do not decode. */
  end (callback: (digests: Map<Algorithm, Buffer> | null) => void): void
}

/**
 * The digests of bytes a server sends (its own, so decoding is not bounded) with `codings`
 * removed, in the order they were applied; with none, of the bytes themselves.
 */
export function digestsOf (codings: readonly string[], algorithms: readonly Algorithm[]): ContentDigests {
  if (codings.length === 0) {
    const hashes = algorithms.map((algorithm) => algorithm.createHash())
    return {
      write (chunk) {
        for (const hash of hashes) hash.update(chunk)
      },
      whenDrained: (callback) => callback(),
      end: (callback) => callback(new Map(algorithms.map((algorithm, i) => [algorithm, (hashes[i] as Hash).digest()])))
    }
  }
  const hasher = new UnencodedHasher(codings, algorithms, Number.MAX_SAFE_INTEGER)
  return {
    write: (chunk) => { hasher.write(chunk) },
    whenDrained: (callback) => hasher.whenDrained(callback),
    end: (callback) => hasher.end((result) => callback(result instanceof Map ? result : null))
  }
}
