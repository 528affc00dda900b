/** The route error handler that answers the plugin's problems and hands every other error on to the application's. */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify'
import { kAnswersProblems } from '../symbols.js'
import { errorAfterSend } from '../warnings.js'
import { sendProblem } from './answer.js'
import { DigestProblem } from './problems.js'

type Handler = (this: FastifyInstance, error: FastifyError, request: FastifyRequest, reply: FastifyReply) => unknown

/**
 * Takes back the `Connection: close` Fastify sets on a parser's error, leaving the field to Node
 * as for any other response. Node's removeHeader() marks the field removed (`_removedConnection`)
 * and would then send none at all, which alone would tell the failure apart.
 */
function keepConnection (reply: FastifyReply): void {
  reply.removeHeader('connection')
  ;(reply.raw as { _removedConnection?: boolean })._removedConnection = false
}

/**
 * Puts the handler on the route, once however many registrations see it. Fastify chains to the
 * scope's handler when this one rethrows, so the application keeps setErrorHandler to itself.
 * `answersError` readies the reply for an answer (taking back what the response hooks kept of the
 * send that failed), or says none is given: a success send waits for the verdict.
 */
export function answerProblems (route: RouteOptions, answersError: (reply: FastifyReply) => boolean): void {
  const routeErrorHandler = route.errorHandler
  if ((routeErrorHandler as { [kAnswersProblems]?: true } | undefined)?.[kAnswersProblems] === true) return
  const digestErrorHandler: Handler = function (error, request, reply) {
    if (!answersError(reply)) {
      request.log.error({ err: error }, errorAfterSend(request.method, request.url))
      return
    }
    if (error instanceof DigestProblem) {
      // Fastify closes the connection on a parser's error, as the client may still be sending; a
      // verdict comes once the content is complete, so the connection stays as it would for
      // any other answer (pipelined requests behind it are answered, and disclosure `none`
      // does not tell a mismatch by a closing connection).
      if (request.raw.complete) keepConnection(reply)
      return sendProblem(error, request, reply)
    }
    if (routeErrorHandler !== undefined) return routeErrorHandler.call(this, error, request, reply)
    throw error
  }
  route.errorHandler = Object.assign(digestErrorHandler, { [kAnswersProblems]: true as const })
}
