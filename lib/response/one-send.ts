/** One send of a reply at a time through the route's response hooks. */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { Readable } from 'node:stream'
import { kResponseSend } from '../symbols.js'
import { sentTwice } from '../warnings.js'

type SendingReply = FastifyReply & { [kResponseSend]?: unknown }

/**
 * Whether a success send (`done`, Fastify's callback for its onSend hooks) may go through the
 * route's response hooks: the first to reach them. A reply sent twice (an async handler that
 * called reply.send() and returned nothing) runs the hooks twice at once while the plugin's wait,
 * and what they keep on the reply would mix; Fastify too sends the first when an onSend hook is
 * async. The answer to an error always goes: one of 400 or above is not checked here (it carries
 * no digest), and the route's error handler lets any other through, since the send that failed
 * will not be sent.
 */
export function isFirstSend (reply: SendingReply, done: unknown): boolean {
  const first = reply[kResponseSend]
  if (first != null && first !== done) return false
  reply[kResponseSend] = done
  return true
}

/** A later send, not sent: its stream destroyed (so that a file it reads is closed), and logged. */
export function dropLaterSend (request: FastifyRequest, payload: unknown): void {
  request.log.warn(sentTwice(request.method, request.url))
  if (payload instanceof Readable) payload.destroy()
}
