/** The interceptor's handler: one request through its attempts, named after the response's lifecycle. */
import type { IncomingHttpHeaders } from 'node:http'
import { parseDictionary } from '../fields/dictionary.js'
import type { Dispatcher } from 'undici'
import type { Algorithm } from '../fields/algorithms.js'
import { DigestProblemError } from './errors.js'
import type { FieldMap, LargeBody } from './request.js'
import { channels } from '../channels.js'
import { CheckedResponse, type SentRequest } from './checked.js'
import { Relay, untilAborted } from './relay.js'
import { integrityFields } from '../fields/sections.js'
import type { Asked, CheckSettings } from './response.js'

/** A retry the interceptor is about to send, as its `onRetry` option is told. */
export interface DigestRetry {
  /** What the server found: a retry follows an unsupported algorithm or a mismatch, never an invalid value. */
  readonly problem: DigestProblemError
  /** 1 for the first retry. */
  readonly attempt: number
  /** The algorithm of the retry's digest, or null when the interceptor did not digest the request. */
  readonly algorithm: string | null
}

/** The interceptor's options, normalized once. */
export interface ClientSettings extends CheckSettings {
  /** The field added to requests whose content is known, or null for none. */
  readonly field: 'content-digest' | 'repr-digest' | null
  /** The algorithms in order of preference: the first digests requests. */
  readonly preferred: readonly Algorithm[]
  /** The Want-* fields every request carries, with their value. */
  readonly want: Readonly<Record<string, string>>
  readonly maxRetries: number
  readonly onRetry: ((retry: DigestRetry) => void | Promise<void>) | null
  readonly maxBufferedBody: number
  readonly largeBody: LargeBody
}

type Controller = Dispatcher.DispatchController
type Handler = Dispatcher.DispatchHandler

// A problem document longer than this is not read for a retry: it is handed on as it comes.
const maxProblem = 64 * 1024

/** The client's algorithms a Want-* field asks for, most preferred first (RFC 9530 section 4), if it parses. */
export function preferredIn (settings: CheckSettings, field: string | undefined): Algorithm[] {
  let weights
  try {
    weights = parseDictionary(field ?? '')
  } catch {
    return []
  }
  const usable = [...weights].flatMap(([key, [weight]]) => {
    const algorithm = settings.algorithms.get(key)
    return algorithm === undefined || typeof weight !== 'number' || weight <= 0 ? [] : [{ algorithm, weight }]
  })
  return usable.sort((a, b) => b.weight - a.weight).map(({ algorithm }) => algorithm)
}

// What the request's Want-* fields ask for: a field announced for the trailer section is hashed
// with those algorithms only, not every one the client has.
function askedIn (settings: CheckSettings, fields: FieldMap): Asked {
  const asked: Asked = {}
  for (const field of integrityFields) {
    const want = fields[`want-${field}`]
    if (want !== undefined) asked[field] = preferredIn(settings, [want].flat().join(', '))
  }
  return asked
}

interface HeldProblem {
  readonly statusCode: number
  readonly headers: IncomingHttpHeaders
  readonly statusMessage: string | undefined
  readonly chunks: Buffer[]
  size: number
}

/**
 * Whether a problem calls for a retry, and with which algorithm: the one the server prefers after
 * an unsupported one, the same after a mismatch (an intermediary may have changed the content),
 * none after an invalid value, which the same request would get again (problem-types section 4).
 */
function retryFor (settings: ClientSettings, held: HeldProblem, sent: Algorithm | null):
{ problem: DigestProblemError, algorithm: Algorithm | null } | null {
  const problem = DigestProblemError.from(held.statusCode, held.headers, Buffer.concat(held.chunks, held.size))
  if (problem === null || problem.kind === 'invalid-value') return null
  if (problem.kind === 'mismatching-value') return { problem, algorithm: sent }
  if (sent === null || settings.field === null) return null
  const algorithm = preferredIn(settings, problem.want[`want-${settings.field}`]).find((offered) => offered !== sent)
  return algorithm === undefined ? null : { problem, algorithm }
}

/**
 * One request through its attempts. A digest problem that a retry can fix is read instead of
 * handed on, and the request sent again with `send`; every other response goes to the consumer
 * through a CheckedResponse.
 */
export class DigestHandler implements Handler {
  readonly #settings: ClientSettings
  readonly #handler: Handler
  readonly #send: (algorithm: Algorithm | null) => void
  readonly #relay: Relay
  readonly #replayable: boolean
  readonly #response: CheckedResponse
  readonly #request: SentRequest
  #algorithm: Algorithm | null
  #retries = 0
  #started: boolean
  #problem: HeldProblem | null = null

  constructor (settings: ClientSettings, handler: Handler, request: SentRequest, fields: FieldMap, replayable: boolean,
    algorithm: Algorithm | null, send: (algorithm: Algorithm | null) => void, started: Relay | null) {
    this.#settings = settings
    // The consumer's controller, when it was handed over before the body was read.
    this.#relay = started ?? new Relay()
    this.#started = started !== null
    this.#handler = handler
    this.#replayable = replayable && fields.expect === undefined
    this.#request = request
    this.#response = new CheckedResponse(handler, this.#relay, settings, request, askedIn(settings, fields))
    this.#algorithm = algorithm
    this.#send = send
  }

  onRequestStart (controller: Controller, context: unknown): void {
    this.#relay.attach(controller)
    if (this.#started) return
    this.#started = true
    this.#handler.onRequestStart?.(this.#relay, context)
  }

  onResponseStart (_controller: Controller, statusCode: number, headers: IncomingHttpHeaders, statusMessage?: string):
  void {
    const problem = statusCode === 400 && this.#replayable && this.#retries < this.#settings.maxRetries &&
      String(headers['content-type']).toLowerCase().startsWith('application/problem+json')
    if (problem) this.#problem = { statusCode, headers, statusMessage, chunks: [], size: 0 }
    else this.#response.start(statusCode, headers, statusMessage)
  }

  onResponseData (_controller: Controller, chunk: Buffer): void {
    const problem = this.#problem
    if (problem === null) {
      this.#response.data(chunk)
      return
    }
    problem.chunks.push(chunk)
    problem.size += chunk.length
    if (problem.size > maxProblem) this.#handOn(problem)
  }

  onResponseEnd (_controller: Controller, trailers: IncomingHttpHeaders): void {
    const problem = this.#problem
    const retry = problem === null ? null : retryFor(this.#settings, problem, this.#algorithm)
    if (retry !== null) {
      this.#retry(retry.problem, retry.algorithm)
      return
    }
    if (problem !== null) this.#handOn(problem)
    this.#response.end(trailers)
  }

  onResponseError (_controller: Controller, error: Error): void {
    this.#response.error(error)
  }

  // A problem not retried goes to the consumer as it came, checked like any response.
  #handOn (problem: HeldProblem): void {
    this.#problem = null
    this.#response.start(problem.statusCode, problem.headers, problem.statusMessage)
    for (const chunk of problem.chunks) this.#response.data(chunk)
  }

  #retry (problem: DigestProblemError, algorithm: Algorithm | null): void {
    this.#problem = null
    this.#retries++
    this.#algorithm = algorithm
    const retry: DigestRetry = { problem, attempt: this.#retries, algorithm: algorithm?.key ?? null }
    if (channels.clientRetry.hasSubscribers) channels.clientRetry.publish({ request: this.#request, retry })
    const told = this.#settings.onRetry?.(retry)
    // An onRetry that returns a promise is waited for; its rejection reaches the consumer.
    if (!(told instanceof Promise)) {
      this.#send(algorithm)
      return
    }
    // The consumer's abort ends the wait: nothing is sent once it aborted.
    untilAborted(this.#relay.signal, () => told).then(() => { this.#send(algorithm) }, (error: Error) => { this.#response.fail(error) })
  }
}
