/**
 * Handlers of undici's older shape (onConnect, onHeaders, onData, onComplete, onError), which the
 * built-in fetch of Node 22 and 24 still dispatches: undici 7's compose() converted them for each
 * interceptor, undici 8's does not, so the interceptor converts them itself.
 */
import type { IncomingHttpHeaders } from 'node:http'
import type { Duplex } from 'node:stream'
import type { Dispatcher } from 'undici'
import { invalidOption } from '../errors.js'
import { rawSection } from './relay.js'

type Controller = Dispatcher.DispatchController
type Handler = Dispatcher.DispatchHandler

/** The older shape, as undici 6 and 7 call it (their types leave out onConnect's context). */
interface OlderHandler {
  onConnect?: (abort: (reason?: Error) => void, context: unknown) => void
  onUpgrade?: (statusCode: number, headers: Buffer[], socket: Duplex) => void
  onHeaders?: (statusCode: number, headers: Buffer[], resume: () => void, statusText: string) => boolean
  onData?: (chunk: Buffer) => boolean
  onComplete?: (trailers: Buffer[]) => void
  onError?: (error: Error) => void
}

class LegacyHandler implements Handler {
  readonly #legacy: OlderHandler

  constructor (legacy: OlderHandler) {
    this.#legacy = legacy
  }

  onRequestStart (controller: Controller, context: unknown): void {
    this.#legacy.onConnect?.((reason) => { controller.abort(reason ?? new Error('aborted')) }, context)
  }

  onRequestUpgrade (_controller: Controller, statusCode: number, headers: IncomingHttpHeaders, socket: Duplex): void {
    this.#legacy.onUpgrade?.(statusCode, rawSection(headers), socket)
  }

  onResponseStart (controller: Controller, statusCode: number, headers: IncomingHttpHeaders, statusMessage?: string): void {
    const more = this.#legacy.onHeaders?.(statusCode, rawSection(headers), () => { controller.resume() }, statusMessage ?? '')
    if (more === false) controller.pause()
  }

  onResponseData (controller: Controller, chunk: Buffer): void {
    if (this.#legacy.onData?.(chunk) === false) controller.pause()
  }

  onResponseEnd (_controller: Controller, trailers: IncomingHttpHeaders): void {
    this.#legacy.onComplete?.(rawSection(trailers))
  }

  onResponseError (_controller: Controller, error: Error): void {
    this.#legacy.onError?.(error)
  }
}

/**
 * The handler the interceptor works with: the caller's, a converted one of the older shape, or,
 * for a handler of neither shape, an error thrown at once rather than a request nobody answers.
 */
export function currentHandler (handler: Handler): Handler {
  if (typeof handler?.onResponseStart === 'function') return handler
  // Node 24's fetch gives a handler of the older shape with onRequestUpgrade alone of the current one.
  const older = handler as unknown as OlderHandler | null
  if (typeof older?.onHeaders === 'function' || typeof older?.onError === 'function') return new LegacyHandler(older)
  if (typeof handler?.onRequestUpgrade === 'function') return handler
  throw invalidOption('digestInterceptor: handler', 'an undici dispatch handler (onResponseStart, onResponseData, ' +
    'onResponseEnd, onResponseError) or one of the older shape (onHeaders, onData, onComplete, onError)')
}
