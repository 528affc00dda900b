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

/**
 * The older shape, as undici 6 and 7 call it (their types leave out onConnect's context). Of the
 * last four, an upgrade uses onUpgrade alone and any other request the other three.
 */
interface OlderHandler {
  onConnect: (abort: (reason?: Error) => void, context: unknown) => void
  onError: (error: Error) => void
  onUpgrade: (statusCode: number, headers: Buffer[], socket: Duplex) => void
  onHeaders: (statusCode: number, headers: Buffer[], resume: () => void, statusText: string) => boolean
  onData: (chunk: Buffer) => boolean
  onComplete: (trailers: Buffer[]) => void
}

class LegacyHandler implements Handler {
  readonly #legacy: OlderHandler

  constructor (legacy: OlderHandler) {
    this.#legacy = legacy
  }

  onRequestStart (controller: Controller, context: unknown): void {
    this.#legacy.onConnect((reason) => { controller.abort(reason ?? new Error('aborted')) }, context)
  }

  onRequestUpgrade (_controller: Controller, statusCode: number, headers: IncomingHttpHeaders, socket: Duplex): void {
    this.#legacy.onUpgrade(statusCode, rawSection(headers), socket)
  }

  onResponseStart (controller: Controller, statusCode: number, headers: IncomingHttpHeaders, statusMessage?: string): void {
    const more = this.#legacy.onHeaders(statusCode, rawSection(headers), () => { controller.resume() }, statusMessage ?? '')
    if (more === false) controller.pause()
  }

  onResponseData (controller: Controller, chunk: Buffer): void {
    if (this.#legacy.onData(chunk) === false) controller.pause()
  }

  onResponseEnd (_controller: Controller, trailers: IncomingHttpHeaders): void {
    this.#legacy.onComplete(rawSection(trailers))
  }

  onResponseError (_controller: Controller, error: Error): void {
    this.#legacy.onError(error)
  }
}

const currentShape = { request: ['onResponseStart', 'onResponseData', 'onResponseEnd', 'onResponseError'], upgrade: ['onRequestUpgrade', 'onResponseError'] }
const olderShape = { request: ['onConnect', 'onHeaders', 'onData', 'onComplete', 'onError'], upgrade: ['onConnect', 'onUpgrade', 'onError'] }

/**
 * The handler the interceptor works with, for a request or an upgrade: the caller's, a converted
 * one of the older shape, or, for a handler of neither shape whole (undici itself refuses one), an
 * error thrown at once rather than a request nobody answers. Node 24's fetch gives a handler of
 * the older shape with onRequestUpgrade alone of the current one.
 */
export function currentHandler (handler: Handler, kind: 'request' | 'upgrade'): Handler {
  const has = (names: readonly string[]): boolean =>
    names.every((name) => typeof (handler as Record<string, unknown> | null)?.[name] === 'function')
  if (has(currentShape[kind])) return handler
  if (has(olderShape[kind])) return new LegacyHandler(handler as unknown as OlderHandler)
  throw invalidOption('digestInterceptor: handler', `an undici dispatch handler (${currentShape[kind].join(', ')}) ` +
    `or one of the older shape (${olderShape[kind].join(', ')})`)
}
