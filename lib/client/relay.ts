/** The controller a consumer of the client holds, which outlives each attempt of its request. */
import type { IncomingHttpHeaders } from 'node:http'
import type { Dispatcher } from 'undici'

type Controller = Dispatcher.DispatchController

/** A header or trailer section as undici's older handlers and raw sections have it: a name and a value a pair. */
export function rawSection (section: IncomingHttpHeaders): Buffer[] {
  return Object.entries(section).flatMap(([name, value]) =>
    [value ?? []].flat().flatMap((one) => [Buffer.from(name, 'latin1'), Buffer.from(one, 'latin1')]))
}

/**
 * Settles as `wait()` does, or rejects with the consumer's reason once `signal` aborts, having
 * called `onAbort` to let go what it waits on; `wait` is not called once the signal aborted, and the
 * listener is removed either way.
 */
export async function untilAborted<T> (signal: AbortSignal, wait: () => T | Promise<T>, onAbort?: (reason: Error) => void): Promise<T> {
  let abort!: () => void
  const aborted = new Promise<never>((_resolve, reject) => {
    abort = () => {
      const reason = signal.reason as Error
      onAbort?.(reason)
      reject(reason)
    }
  })
  if (signal.aborted) abort()
  else signal.addEventListener('abort', abort, { once: true })
  try {
    return await Promise.race([signal.aborted ? aborted : wait(), aborted])
  } finally {
    signal.removeEventListener('abort', abort)
  }
}

/**
 * The controller the consumer holds across attempts: it acts on the current attempt's, and pauses
 * it while either the consumer or the side decoder asks to.
 */
export class Relay implements Controller {
  #upstream: Controller | null = null
  readonly #holds = new Set<'consumer' | 'decoder'>()
  #reason: Error | null = null
  #headers: IncomingHttpHeaders = {}
  #aborts: AbortController | null = null

  // What the consumer did: an attempt that fails on its own reaches it as an error.
  get aborted (): boolean { return this.#reason !== null }
  get paused (): boolean { return this.#holds.size > 0 }
  get reason (): Error | null { return this.#reason }

  /**
   * The response's raw header section, which undici 8's fetch reads from the controller (and,
   * without one, takes the response for one without any header): the attempt's own, or made from
   * the header section handed on.
   */
  get rawHeaders (): NonNullable<Controller['rawHeaders']> {
    return this.#upstream?.rawHeaders ?? rawSection(this.#headers)
  }

  /** Aborted with the consumer's reason: what a read of the request's body, before any attempt, stops on. */
  get signal (): AbortSignal {
    if (this.#aborts === null) {
      this.#aborts = new AbortController()
      if (this.#reason !== null) this.#aborts.abort(this.#reason)
    }
    return this.#aborts.signal
  }

  /** The header section handed on to the consumer, for rawHeaders. */
  handedOn (headers: IncomingHttpHeaders): void {
    this.#headers = headers
  }

  attach (upstream: Controller): void {
    this.#upstream = upstream
    if (this.#reason !== null) upstream.abort(this.#reason)
    else if (this.#holds.size > 0) upstream.pause()
  }

  abort (reason: Error): void {
    this.#reason = reason
    this.#aborts?.abort(reason)
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
