/** One send of a reply at a time through the route's response hooks. */
import type { DoneFuncWithErrOrRes, FastifyReply, FastifyRequest, onSendHookHandler } from 'fastify'
import { Readable } from 'node:stream'
import { kResponseSend } from '../symbols.js'
import { sentTwice } from '../warnings.js'
import { continueSend, type SendDone } from './continue-send.js'

/** The send on its way (Fastify's callback for its onSend hooks), and what the last hook handed on. */
interface ResponseSend { readonly done: unknown, handedOn: unknown, failed: boolean }

type SendingReply = FastifyReply & { [kResponseSend]?: ResponseSend | null }

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
export function isFirstSend (reply: SendingReply, done: unknown): boolean {
  const first = reply[kResponseSend]
  if (first != null && !isOver(reply, first)) return false
  reply[kResponseSend] = { done, handedOn: null, failed: false }
  return true
}

/** Hands the payload of the route's last response hook to Fastify, noting it for the send on its way. */
export function handOn (reply: SendingReply, done: SendDone, payload: unknown): void {
  const send = reply[kResponseSend]
  if (send?.done === done) send.handedOn = payload
  continueSend(done, payload)
}

/** Marks the send `done` is Fastify's callback for as failed, when it is the one on its way. */
function failSend (reply: SendingReply, done: DoneFuncWithErrOrRes): void {
  const send = reply[kResponseSend]
  if (send?.done === done) send.failed = true
}

/** A route hook between the plugin's two, whose failure ends the send it was on. */
export function endsSendOnFailure (hook: onSendHookHandler): onSendHookHandler {
  return function watchedOnSend (request, reply: SendingReply, payload, done) {
    // What the hook passes on goes to Fastify as it is: done(), done(error) or done(null, payload).
    const next = (...args: unknown[]): void => {
      if (args[0] != null) failSend(reply, done)
      ;(done as (...args: unknown[]) => void)(...args)
    }
    let result: unknown
    try {
      result = hook.call(this, request, reply, payload, next as DoneFuncWithErrOrRes)
    } catch (error) {
      failSend(reply, done)
      throw error
    }
    if (typeof (result as Promise<unknown> | undefined)?.then !== 'function') return result as undefined
    return (result as Promise<unknown>).then(undefined, (error: unknown) => {
      failSend(reply, done)
      throw error
    }) as never
  }
}

/** A later send, not sent: its stream destroyed (so that a file it reads is closed), and logged. */
export function dropLaterSend (request: FastifyRequest, payload: unknown): void {
  request.log.warn(sentTwice(request.method, request.url))
  if (payload instanceof Readable) payload.destroy()
}
