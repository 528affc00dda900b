/** One send of a reply at a time through the route's response hooks. */
import type { DoneFuncWithErrOrRes, FastifyReply, FastifyRequest, onSendHookHandler } from 'fastify'
import { ServerResponse } from 'node:http'
import { Readable } from 'node:stream'
import { sentTwice } from '../warnings.js'
import { continueSend, type SendDone } from './continue-send.js'
import { replyState, type ResponseSend, type SentAs } from './reply-state.js'
import { placeDigestFields, withdrawDigestFields, type Placement } from './sent-fields.js'

/**
 * Whether a send that failed will not be sent: a route hook between the plugin's failed it, or the
 * stream it handed to Fastify failed before its first byte. Fastify then answers the error.
 */
function isOver (reply: FastifyReply, send: ResponseSend): boolean {
  const stream = send.handedOn
  return send.failed || (stream instanceof Readable && stream.destroyed && !stream.readableEnded && !reply.raw.headersSent)
}

/**
 * Whether a success send (`done`, Fastify's callback for its onSend hooks) may go through the
 * route's response hooks: the first to reach them, unless that one is over. A reply sent twice (an
 * async handler that called reply.send() and returned nothing) runs the hooks twice at once while
 * the plugin's wait, and what they keep on the reply would mix; Fastify too sends the first when
 * an onSend hook is async. The answer to an error always goes: one of 400 or above is not checked
 * here (it carries no digest), and the route's error handler lets any other through.
 */
export function isFirstSend (reply: FastifyReply, done: unknown): boolean {
  const state = replyState(reply)
  const first = state.send
  if (first !== null && !isOver(reply, first)) return false
  state.send = { done, handedOn: null, failed: false }
  return true
}

/**
 * Readies the reply for the answer to an error, or says there is none to give: while a success
 * send waits for the verdict, Fastify alone would have written it, and only logs the error. The
 * answer is a send of its own: the send that failed is not on its way, and the fields placed for
 * it go before any error handler runs (one that hijacks the reply writes its own framing).
 */
export function answersError (reply: FastifyReply): boolean {
  if (isHeld(reply)) return false
  replaceWaitingSend(reply)
  withdrawDigestFields(reply)
  return true
}

/**
 * Notes that the success send waiting in the route's hooks, if any, is replaced by an answer of
 * 400 or above (a later send, or the answer to an error): it is dropped where it waits (wasReplaced).
 */
export function replaceWaitingSend (reply: FastifyReply): void {
  const state = replyState(reply)
  if (state.send !== null) state.replaced = state.send.done
  state.send = null
}

/** Whether a success send of the reply waits for the verdict: any later send is dropped. */
export function isHeld (reply: FastifyReply): boolean {
  return replyState(reply).held !== null
}

function unheard (): void {}

/** Node's marks of the framing fields removed from an HTTP/1.1 response, which decide its framing. */
function removedOf (raw: ServerResponse): NonNullable<SentAs['removed']> {
  const { _removedTE, _removedContLen, _removedConnection } = raw as unknown as NonNullable<SentAs['removed']>
  return { _removedTE, _removedContLen, _removedConnection }
}

/** The status and fields of a reply as its send leaves them, before a wait of the plugin's. */
export function sentAs (reply: FastifyReply): SentAs {
  const headers = reply.getHeaders() as Record<string, unknown>
  // Fastify appends to a Set-Cookie list in place.
  for (const name in headers) if (Array.isArray(headers[name])) headers[name] = [...headers[name]]
  // HTTP/2 has no status message, and warns when one is read or set.
  const http1 = reply.raw instanceof ServerResponse
  return { status: reply.statusCode, message: http1 ? reply.raw.statusMessage : null, headers, removed: http1 ? removedOf(reply.raw) : null }
}

/**
 * Puts the reply back as its send left it, once a wait of the plugin's is over, so that what the
 * application did to the reply after it (a status, a field, @fastify/static's fields for a later
 * send that is dropped) never goes with its payload: Fastify alone writes a string or Buffer at the
 * send, and would write these over a payload they do not describe.
 */
function restoreSent (reply: FastifyReply, as: SentAs): void {
  const now = reply.getHeaders() as Record<string, unknown>
  for (const name in now) if (!(name in as.headers)) reply.removeHeader(name)
  for (const [name, value] of Object.entries(as.headers)) {
    if (now[name] === value) continue
    reply.removeHeader(name)
    reply.header(name, value)
  }
  reply.code(as.status)
  if (as.message !== null) reply.raw.statusMessage = as.message
  // Removing a Transfer-Encoding the application added marks it removed, and Node would then frame
  // the response with neither chunks nor a length, to the close of the connection (RFC 9112 section 6).
  if (as.removed !== null && !reply.raw.headersSent) Object.assign(reply.raw, as.removed)
}

/** Notes the status and fields of the reply's success send as it is held for the verdict. */
export function holdSend (reply: FastifyReply, payload: unknown): void {
  replyState(reply).held = { payload, as: sentAs(reply), laterLogged: false }
  // A stream's error while it waits is Fastify's to answer once it is sent: unheard, it would end the process.
  const stream = payload as { pipe?: unknown, on?: (event: string, listener: () => void) => void } | null
  if (typeof stream?.pipe === 'function' && typeof stream.on === 'function') stream.on('error', unheard)
}

/** Puts the reply back as its held send had it, once the verdict came (restoreSent). */
export function asSent (reply: FastifyReply): void {
  const state = replyState(reply)
  const held = state.held
  if (held === null) return
  state.held = null
  restoreSent(reply, held.as)
}

/**
 * Whether the client left while a send waited in the plugin's hooks: its connection (HTTP/1.1) or
 * its stream (HTTP/2) is closed. Fastify would pipe a stream into a closed HTTP/2 response and never
 * destroy it, so that the file it reads stays open; nobody is answered.
 */
function clientLeft (reply: FastifyReply): boolean {
  const raw = reply.raw as { destroyed?: boolean, stream?: { destroyed: boolean } }
  return raw.destroyed === true || raw.stream?.destroyed === true
}

/**
 * Whether an answer replaced the send `done` is Fastify's callback for while it waited: Fastify has
 * written that answer, and would write this one into it (over HTTP/1.1 the connection closed under
 * the client, over HTTP/2 the stream reset). What the send found is then not the answer's.
 */
export function wasReplaced (reply: FastifyReply, done: unknown): boolean {
  return replyState(reply).replaced === done
}

/**
 * Whether a send that waited in one of the plugin's hooks goes on, the reply put back as it was sent
 * (`as`): not when an answer replaced it or its client left meanwhile, its payload then dropped.
 */
export function resumesAfterWait (reply: FastifyReply, done: unknown, payload: unknown, as: SentAs): boolean {
  if (wasReplaced(reply, done) || clientLeft(reply)) {
    dropPayload(payload)
    return false
  }
  restoreSent(reply, as)
  return true
}

/**
 * Hands the payload of the route's last response hook to Fastify with the fields found for it,
 * noting it for the send on its way.
 */
export function handOn (reply: FastifyReply, done: SendDone, payload: unknown, placement?: Placement): void {
  const state = replyState(reply)
  if (placement !== undefined) placeDigestFields(reply, placement)
  if (state.send?.done === done) state.send.handedOn = payload
  continueSend(done, payload)
}

/**
 * Marks the send `done` is Fastify's callback for as failed, when it is the one on its way; the
 * payload the failed hook had is not sent, and its stream is destroyed, so that a file is closed.
 */
function failSend (reply: FastifyReply, done: DoneFuncWithErrOrRes, payload: unknown): void {
  const send = replyState(reply).send
  if (send?.done === done) send.failed = true
  dropPayload(payload)
}

/** A route hook between the plugin's two, whose failure ends the send it was on. */
export function endsSendOnFailure (hook: onSendHookHandler): onSendHookHandler {
  return function watchedOnSend (request, reply, payload, done) {
    // What the hook passes on goes to Fastify as it is: done(), done(error) or done(null, payload).
    const next = (...args: unknown[]): void => {
      if (args[0] != null) failSend(reply, done, payload)
      ;(done as (...args: unknown[]) => void)(...args)
    }
    let result: unknown
    try {
      result = hook.call(this, request, reply, payload, next as DoneFuncWithErrOrRes)
    } catch (error) {
      failSend(reply, done, payload)
      throw error
    }
    if (typeof (result as Promise<unknown> | undefined)?.then !== 'function') return result as undefined
    return (result as Promise<unknown>).then(undefined, (error: unknown) => {
      failSend(reply, done, payload)
      throw error
    }) as never
  }
}

/** A payload that will not be sent: a stream destroyed, so that a file it reads is closed. */
export function dropPayload (payload: unknown): void {
  if (!(payload instanceof Readable)) return
  // A file still opening, or a destroy that fails, emits an error nobody else will hear.
  payload.on('error', unheard)
  payload.destroy()
}

/**
 * A later send, not sent, and logged (once while a send is held: an async handler that called
 * reply.send() and returned nothing sends again by itself); its stream destroyed, unless it is
 * the one that goes.
 */
export function dropLaterSend (request: FastifyRequest, reply: FastifyReply, payload: unknown): void {
  const { held, firstPayload } = replyState(reply)
  if (held?.laterLogged !== true) request.log.warn(sentTwice(request.method, request.url))
  if (held !== null) held.laterLogged = true
  if (payload !== held?.payload && payload !== firstPayload) dropPayload(payload)
}
