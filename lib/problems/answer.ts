/** The one way a problem leaves: as the reply's problem document, logged once and published to diagnostics. */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { Readable } from 'node:stream'
import { channels } from '../channels.js'
import { sentAfterProblem } from '../warnings.js'
import type { DigestProblem } from './problems.js'

/**
 * The fields of a payload the problem takes the place of (a success reply held for the verdict):
 * its representation's metadata, validators and range (RFC 9110 sections 8, 8.8, 14.4). Others
 * stay, as on Fastify's error answers: Set-Cookie, CORS, and Location, where an upload resumes.
 */
const replacedFields = ['content-length', 'content-encoding', 'content-language', 'content-location', 'content-range',
  'content-disposition', 'etag', 'last-modified']

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
  if (channels.requestProblem.hasSubscribers) channels.requestProblem.publish({ request, problem })
  for (const name of replacedFields) reply.removeHeader(name)
  reply
    .code(problem.statusCode)
    .headers(problem.headers)
    .type('application/problem+json')
  // Upload-Complete on a problem answering an upload creation or append (resumable uploads draft,
  // "Upload Append"): ?1 once the whole upload failed its digest, so the client does not resume it.
  const upload = request.resumableUpload
  if (upload !== null) reply.header('upload-complete', upload.failed ? '?1' : '?0')
  // As a Buffer, so Fastify sends the media type as registered: JSON defines no charset parameter
  // (RFC 8259 section 11).
  return Buffer.from(reply.serializeInput(problem.document, problem.schema))
}

export function sendProblem (problem: DigestProblem, request: FastifyRequest, reply: FastifyReply): void {
  reply.send(answerWith(problem, request, reply))
}

type Send = FastifyReply['send']

function unheard (): void {}

/**
 * A send of the application's after the plugin answered in its place (a handler that opens a
 * file before it sends, as @fastify/static does): Fastify drops a send once the reply went, and
 * leaves a stream it carries open, a file's descriptor for as long as the process runs.
 */
function sendAfterTheAnswer (this: FastifyReply, payload: unknown): FastifyReply {
  const stream = payload as { pipe?: unknown, destroy?: unknown } | null
  if (typeof stream?.pipe !== 'function') return (Object.getPrototypeOf(this) as { send: Send }).send.call(this, payload)
  // A file still opening, or a destroy that fails, emits an error nobody else will hear.
  if (payload instanceof Readable) payload.on('error', unheard).destroy()
  else if (typeof stream.destroy === 'function') stream.destroy()
  this.log.warn(sentAfterProblem(this.request.method, this.request.url))
  return this
}

/**
 * A reader that listens for 'error' answers the problem (Fastify's parsers send it to the error
 * handler); with none, nobody would, so the plugin does unless a reply went out already.
 */
export function answerUnheard (problem: DigestProblem, heard: boolean, request: FastifyRequest, reply: FastifyReply): void {
  if (heard || reply.sent) return
  sendProblem(problem, request, reply)
  reply.send = sendAfterTheAnswer as Send
}
