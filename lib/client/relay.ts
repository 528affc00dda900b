/** The controller a consumer of the client holds, which outlives each attempt of its request. */
import type { Dispatcher } from 'undici'

type Controller = Dispatcher.DispatchController

/**
 * The controller the consumer holds across attempts: it acts on the current attempt's, and pauses
 * it while either the consumer or the side decoder asks to.
 */
export class Relay implements Controller {
  #upstream: Controller | null = null
  readonly #holds = new Set<'consumer' | 'decoder'>()
  #reason: Error | null = null

  // What the consumer did: an attempt that fails on its own reaches it as an error.
  get aborted (): boolean { return this.#reason !== null }
  get paused (): boolean { return this.#holds.size > 0 }
  get reason (): Error | null { return this.#reason }

  attach (upstream: Controller): void {
    this.#upstream = upstream
    if (this.#reason !== null) upstream.abort(this.#reason)
    else if (this.#holds.size > 0) upstream.pause()
  }

  abort (reason: Error): void {
    this.#reason = reason
    this.#upstream?.abort(reason)
  }

  pause (): void { this.hold('consumer') }
  resume (): void { this.release('consumer') }

  hold (by: 'consumer' | 'decoder'): void {
    this.#holds.add(by)
    this.#upstream?.pause()
  }

  release (by: 'consumer' | 'decoder'): void {
    this.#holds.delete(by)
    if (this.#holds.size === 0) this.#upstream?.resume()
  }
}
