/** The algorithm each origin asked for, learnt from its digest problems, so that the next request is sent with it at once. */
import type { Algorithm } from '../fields/algorithms.js'

/** Origins remembered by one interceptor; the least recently used goes first. */
export const maxOrigins = 1024

export class PreferredAlgorithms {
  readonly #byOrigin = new Map<string, Algorithm>()
  readonly #limit: number

  constructor (limit = maxOrigins) {
    this.#limit = limit
  }

  /** The algorithm the origin asked for last, now the most recently used; else undefined. */
  of (origin: string): Algorithm | undefined {
    const algorithm = this.#byOrigin.get(origin)
    if (algorithm !== undefined) {
      this.#byOrigin.delete(origin)
      this.#byOrigin.set(origin, algorithm)
    }
    return algorithm
  }

  learn (origin: string, algorithm: Algorithm): void {
    this.#byOrigin.delete(origin)
    this.#byOrigin.set(origin, algorithm)
    if (this.#byOrigin.size > this.#limit) this.#byOrigin.delete(this.#byOrigin.keys().next().value as string)
  }
}
