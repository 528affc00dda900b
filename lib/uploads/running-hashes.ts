/**
 * An upload's running hashes over a request's content, with the hashes after each of its last
 * chunks, so that an application that keeps the bytes of a request cut short can store the state
 * of exactly the bytes it wrote (draft-ietf-httpbis-resumable-upload-15 section 4.4.2: a server
 * SHOULD keep what it can).
 */
import type { Algorithm } from '../fields/algorithms.js'
import { updateState } from './hash-states.js'

/** How many chunk ends are kept: a writer lags the source by its buffer, a few chunks. */
export const recentChunks = 64

export class RunningHashes {
  readonly #algorithms: readonly Algorithm[]
  readonly #started: readonly Uint8Array[]
  #hashes: readonly Uint8Array[]
  #received = 0
  // The last chunks' ends, oldest first, each with the hashes after it; null when none are kept.
  readonly #recent: Array<{ readonly end: number, readonly hashes: readonly Uint8Array[] }> | null

  constructor (algorithms: readonly Algorithm[], hashes: readonly Uint8Array[], keepRecent: boolean) {
    this.#algorithms = algorithms
    this.#started = hashes
    this.#hashes = hashes
    this.#recent = keepRecent ? [] : null
  }

  /** The bytes of the request's content hashed so far. */
  get received (): number {
    return this.#received
  }

  get hashes (): readonly Uint8Array[] {
    return this.#hashes
  }

  update (bytes: Buffer): void {
    this.#received += bytes.length
    this.#hashes = this.#algorithms.map(({ key }, i) => updateState(key, this.#hashes[i] as Uint8Array, bytes))
    if (this.#recent === null) return
    if (this.#recent.length === recentChunks) this.#recent.shift()
    this.#recent.push({ end: this.#received, hashes: this.#hashes })
  }

  /** The hashes after the first `received` bytes, if none or a recent chunk's end; else null. */
  at (received: number): readonly Uint8Array[] | null {
    if (received === 0) return this.#started
    return this.#recent?.findLast(({ end }) => end === received)?.hashes ?? null
  }
}
