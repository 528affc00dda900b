/** The digests of a request's content as it arrives: of the bytes received, and of the decoded content. */
import type { Hash } from 'node:crypto'
import type { Algorithm } from '../fields/algorithms.js'
import type { UnencodedHasher } from '../fields/unencoded.js'
import type { Finding } from '../findings.js'

/**
 * A resumable upload's running digest as the request path sees it (resumable.ts has the upload):
 * continued by every chunk, compared when a request completes the upload.
 */
export interface RunningDigest {
  /** Whether a Repr-Digest of the whole upload is compared when it completes. */
  readonly checked: boolean
  /** Whether this request completes the upload. */
  readonly complete: boolean
  update (bytes: Buffer): void
  /** The mismatches of the whole upload's digest, when this request completes it; else null. */
  findings (): Finding[] | null
  /** The content was verified: the upload's stored state now covers it. */
  accept (): void
}

export class ContentHashes {
  // TypeScript-private, not #private: made for every request with a digest (docs/development.md).
  private readonly algorithms: readonly Algorithm[]
  private readonly decoder: UnencodedHasher | null
  private readonly upload: RunningDigest | null
  // Content that arrives in one chunk is hashed in one call at its end, without setting up a Hash
  // (most of the cost of a small body): the chunk waits here, held back from readers. Every other
  // chunk is hashed as it arrives, before any reader can see it.
  private only: Buffer | null = null
  private hashes: Hash[] | null = null

  constructor (algorithms: readonly Algorithm[], decoder: UnencodedHasher | null, upload: RunningDigest | null) {
    this.algorithms = algorithms
    this.decoder = decoder
    this.upload = upload
  }

  /** Takes a chunk readers cannot see before the next arrives (else hash()); a first one may wait until then. */
  add (bytes: Buffer): void {
    // An upload's running digest takes every chunk as it arrives, so none waits.
    if (this.hashes === null && this.only === null && this.upload === null) this.only = bytes
    else this.hash(bytes)
  }

  /**
   * Hashes a chunk now, after a first one that waited. Readers get its first `released` bytes apart
   * from the rest (held-content.ts): an upload's running state is saved at the end of each part.
   */
  hash (bytes: Buffer, released = bytes.length): void {
    if (this.hashes === null) {
      this.hashes = this.algorithms.map((algorithm) => algorithm.createHash())
      const only = this.only
      this.only = null
      if (only !== null) this.hash(only)
    }
    for (const hash of this.hashes) hash.update(bytes)
    if (released < bytes.length) {
      this.upload?.update(bytes.subarray(0, released))
      this.upload?.update(bytes.subarray(released))
    } else this.upload?.update(bytes)
    this.decoder?.write(bytes)
  }

  /** The digests of the bytes received, once they all were; the decoder then has them all too. */
  digests (): Map<Algorithm, Buffer> {
    const only = this.only
    // The one chunk goes to the decoder now, at the end, like every other chunk before it is seen.
    if (only !== null) this.decoder?.write(only)
    return new Map(this.algorithms.map((algorithm, i) => [algorithm, this.digestAt(i)]))
  }

  /**
   * The digest of the first algorithm, once every byte was received, without the Map of digests():
   * for content hashed with one algorithm and no decoder (common-case.ts).
   */
  firstDigest (): Buffer {
    return this.digestAt(0)
  }

  private digestAt (i: number): Buffer {
    const hashes = this.hashes
    if (hashes !== null) return (hashes[i] as Hash).digest()
    const algorithm = this.algorithms[i] as Algorithm
    return this.only === null ? algorithm.emptyDigest : algorithm.digest(this.only)
  }
}
