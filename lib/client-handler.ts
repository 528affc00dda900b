/** The interceptor's handler: one request through its attempts, named after the response's lifecycle. */
import type { IncomingHttpHeaders } from 'node:http'
import { parseDictionary } from 'structured-headers'
import type { Dispatcher } from 'undici'
import type { Algorithm } from './algorithms.js'
import { DigestProblemError } from './client-errors.js'
import type { FieldMap } from './client-request.js'
import { integrityFields, ResponseCheck, type Asked, type CheckSettings } from './client-response.js'

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
  readonly onRetry: ((retry: DigestRetry) => void) | null
  readonly maxBufferedBody: number
}

type Controller = Dispatcher.DispatchController
type Handler = Dispatcher.DispatchHandler

// A problem document longer than this is not read for a retry: it is handed on as it comes.
const maxProblem = 64 * 1024

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

/** The client's algorithms a Want-* field asks for, most preferred first (RFC 9530 section 4); none when it does not parse. */
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
 * One request through its attempts. Each response is checked as it streams (ResponseCheck) and its
 * end held until the verdict; a digest problem that a retry can fix (problem-types section 4) is
 * read instead of handed on, and the request sent again with `send`.
 */
export class DigestHandler implements Handler {
  readonly #settings: ClientSettings
  readonly #handler: Handler
  readonly #method: string
  readonly #send: (algorithm: Algorithm | null) => void
  readonly #relay = new Relay()
  readonly #replayable: boolean
  readonly #asked: Asked
  #algorithm: Algorithm | null
  #retries = 0
  #started = false
  #check: ResponseCheck | null = null
  #problem: HeldProblem | null = null

  constructor (settings: ClientSettings, handler: Handler, method: string, fields: FieldMap, replayable: boolean,
    algorithm: Algorithm | null, send: (algorithm: Algorithm | null) => void) {
    this.#settings = settings
    this.#handler = handler
    this.#method = method
    this.#replayable = replayable && fields.expect === undefined
    this.#asked = askedIn(settings, fields)
    this.#algorithm = algorithm
    this.#send = send
  }

  onRequestStart (controller: Controller, context: unknown): void {
    this.#relay.attach(controller)
    if (this.#started) return
    this.#started = true
    this.#handler.onRequestStart?.(this.#relay, context)
  }

  onResponseStart (_controller: Controller, statusCode: number, headers: IncomingHttpHeaders, statusMessage?: string): void {
    const problem = statusCode === 400 && this.#replayable && this.#retries < this.#settings.maxRetries &&
      String(headers['content-type']).toLowerCase().startsWith('application/problem+json')
    if (problem) {
      this.#problem = { statusCode, headers, statusMessage, chunks: [], size: 0 }
      return
    }
    this.#begin(statusCode, headers, statusMessage)
  }

  onResponseData (_controller: Controller, chunk: Buffer): void {
    const problem = this.#problem
    if (problem === null) {
      this.#data(chunk)
      return
    }
    problem.chunks.push(chunk)
    problem.size += chunk.length
    if (problem.size > maxProblem) this.#handOn(problem)
  }

  onResponseEnd (_controller: Controller, trailers: IncomingHttpHeaders): void {
    const problem = this.#problem
    if (problem !== null && this.#retry(problem)) return
    if (problem !== null) this.#handOn(problem)
    const check = this.#check
    if (check === null) {
      this.#handler.onResponseEnd?.(this.#relay, trailers)
      return
    }
    check.end(trailers, (error) => {
      if (error === null) this.#handler.onResponseEnd?.(this.#relay, trailers)
      else this.#handler.onResponseError?.(this.#relay, error)
    })
  }

  onResponseError (_controller: Controller, error: Error): void {
    this.#check?.abandon()
    this.#handler.onResponseError?.(this.#relay, error)
  }

  #begin (statusCode: number, headers: IncomingHttpHeaders, statusMessage: string | undefined): void {
    this.#check = ResponseCheck.of(this.#method, statusCode, headers, this.#settings, this.#asked)
    this.#handler.onResponseStart?.(this.#relay, statusCode, headers, statusMessage)
  }

  #data (chunk: Buffer): void {
    const check = this.#check
    // Hashed before the consumer has the chunk, which it may change in place.
    if (check !== null && !check.update(chunk)) {
      this.#relay.hold('decoder')
      check.whenDrained(() => { this.#relay.release('decoder') })
    }
    this.#handler.onResponseData?.(this.#relay, chunk)
  }

  // A problem not retried goes to the consumer as it came, checked like any response.
  #handOn (problem: HeldProblem): void {
    this.#problem = null
    this.#begin(problem.statusCode, problem.headers, problem.statusMessage)
    for (const chunk of problem.chunks) this.#data(chunk)
  }

  /**
   * Sends the request again when the problem says a retry can succeed: with the algorithm the
   * server prefers after an unsupported one, unchanged after a mismatch (an intermediary may have
   * changed it), never after an invalid value, which the same request would get again.
   */
  #retry (held: HeldProblem): boolean {
    const problem = DigestProblemError.from(held.statusCode, held.headers, Buffer.concat(held.chunks, held.size))
    if (problem === null || problem.kind === 'invalid-value') return false
    let algorithm = this.#algorithm
    if (problem.kind === 'unsupported-algorithm') {
      const field = this.#settings.field
      if (algorithm === null || field === null) return false
      const sent = algorithm
      algorithm = preferredIn(this.#settings, problem.want[`want-${field}`]).find((offered) => offered !== sent) ?? null
      if (algorithm === null) return false
    }
    this.#problem = null
    this.#retries++
    this.#algorithm = algorithm
    this.#settings.onRetry?.({ problem, attempt: this.#retries, algorithm: algorithm?.key ?? null })
    this.#send(algorithm)
    return true
  }
}
