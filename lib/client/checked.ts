/** A response on its way to the consumer: hashed as it passes, its last kilobyte and end held until the verdict. */
import type { IncomingHttpHeaders } from 'node:http'
import type { Dispatcher } from 'undici'
import { channels } from '../channels.js'
import { HeldContent } from '../fields/held-content.js'
import type { Relay } from './relay.js'
import { responseCheck, type Asked, type Checked, type CheckSettings, type ResponseCheck } from './response.js'

type Handler = Dispatcher.DispatchHandler

/** The request a response answers, as the client's diagnostics channels name it. */
export interface SentRequest {
  readonly origin: string
  readonly method: string
  readonly path: string
}

/** Tells the subscribers of the client's channels what a response's check found. */
function publishCheck (request: SentRequest, error: Error | null, checked: readonly Checked[]): void {
  if (error !== null && channels.clientFailed.hasSubscribers) channels.clientFailed.publish({ request, error })
  if (error === null && checked.length > 0 && channels.clientVerified.hasSubscribers) {
    const fields = [...new Set(checked.map(({ field }) => field))]
    const algorithms = [...new Set(checked.map(({ algorithm }) => algorithm))]
    channels.clientVerified.publish({ request, fields, algorithms })
  }
}

/**
 * The consumer's side of one response. The last kilobyte is held as the server holds a request's,
 * so that a consumer that decodes the body itself (fetch) cannot finish a coded body before the
 * verdict; on a mismatch the consumer gets the error in place of the rest and the end.
 */
export class CheckedResponse {
  readonly #handler: Handler
  readonly #relay: Relay
  readonly #settings: CheckSettings
  readonly #request: SentRequest
  readonly #asked: Asked
  #check: ResponseCheck | null = null
  #held = new HeldContent(null)

  constructor (handler: Handler, relay: Relay, settings: CheckSettings, request: SentRequest, asked: Asked) {
    this.#handler = handler
    this.#relay = relay
    this.#settings = settings
    this.#request = request
    this.#asked = asked
  }

  start (statusCode: number, headers: IncomingHttpHeaders, statusMessage: string | undefined): void {
    this.#check = responseCheck(this.#request.method, statusCode, headers, this.#settings, this.#asked)
    this.#held = new HeldContent(null)
    this.#relay.handedOn(headers)
    this.#handler.onResponseStart?.(this.#relay, statusCode, headers, statusMessage)
  }

  data (chunk: Buffer): void {
    const check = this.#check
    // Hashed before the consumer has the chunk, which it may change in place.
    if (check !== null && !check.update(chunk)) {
      this.#relay.hold('decoder')
      check.whenDrained(() => { this.#relay.release('decoder') })
    }
    this.#held.take(chunk, this.#deliver, this)
  }

  end (trailers: IncomingHttpHeaders): void {
    const check = this.#check
    if (check === null) {
      this.#release(trailers)
      return
    }
    let deciding = true
    check.end(trailers, (error, checked) => {
      publishCheck(this.#request, error, checked)
      if (error === null) this.#release(trailers)
      // Told on a later turn when the verdict came at once: fetch() never settles a small body
      // whose error comes in the same parser pass as its last data, before its stream pulled.
      else if (deciding) this.fail(error)
      else this.#handler.onResponseError?.(this.#relay, error)
    })
    deciding = false
  }

  error (error: Error): void {
    this.#check?.abandon()
    this.#handler.onResponseError?.(this.#relay, error)
  }

  fail (error: Error): void {
    setImmediate(() => { this.#handler.onResponseError?.(this.#relay, error) })
  }

  readonly #deliver = (chunk: Buffer): boolean => {
    this.#handler.onResponseData?.(this.#relay, chunk)
    return true
  }

  #release (trailers: IncomingHttpHeaders): void {
    for (const chunk of this.#held.release()) this.#handler.onResponseData?.(this.#relay, chunk)
    this.#handler.onResponseEnd?.(this.#relay, trailers)
  }
}
