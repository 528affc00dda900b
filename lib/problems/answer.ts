/** The one way a problem leaves: as the reply's problem document, logged once. */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { DigestProblem } from './problems.js'
import { uploadCompleteOf } from '../uploads/resumable.js'

/**
 * Makes the reply the problem, as RFC 9457 says, and returns its payload; logs what was found,
 * also when the response discloses nothing.
 */
export function answerWith (problem: DigestProblem, request: FastifyRequest, reply: FastifyReply): Buffer {
  // abstract-logging, Fastify's logger when logging is off, has no `silent`.
  if (problem.logLevel !== 'silent') {
    const notListed = problem.notListed === 0 ? {} : { digestFieldsNotListed: problem.notListed }
    const found = { problemType: problem.type, digestFields: problem.found, ...notListed }
    request.log[problem.logLevel](found, problem.logMessage)
  }
  reply
    .code(problem.statusCode)
    .headers(problem.headers)
    .type('application/problem+json')
  uploadCompleteOf(request, reply)
  // As a Buffer, so Fastify sends the media type as registered: JSON defines no charset parameter
  // (RFC 8259 section 11).
  return Buffer.from(reply.serializeInput(problem.document, problem.schema))
}

export function sendProblem (problem: DigestProblem, request: FastifyRequest, reply: FastifyReply): void {
  reply.send(answerWith(problem, request, reply))
}
