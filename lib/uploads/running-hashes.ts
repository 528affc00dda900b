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
  // The ends of the last chunks, oldest first, and the hashes after each; null when none are kept.
  readonly #ends: number[] | null
  readonly #recent: Array<readonly Uint8Array[]> = []

  constructor (algorithms: readonly Algorithm[], hashes: readonly Uint8Array[], keepRecent: boolean) {
    this.#algorithms = algorithms
    this.#started = hashes
    this.#hashes = hashes
    this.#ends = keepRecent ? [] : null
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
    if (this.#ends === null) return
    if (this.#ends.length === recentChunks) {
      this.#ends.shift()
      this.#recent.shift()
    }
    this.#ends.push(this.#received)
    this.#recent.push(this.#hashes)
  }

  /** The hashes after the first `received` bytes, if none or a recent chunk's end; else null. */
  at (received: number): readonly Uint8Array[] | null {
    if (received === 0) return this.#started
    const index = this.#ends?.lastIndexOf(received) ?? -1
    return index === -1 ? null : this.#recent[index] as readonly Uint8Array[]
  }
}
