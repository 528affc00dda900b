import type {
  FastifyContextConfig,
  FastifyError,
  FastifyInstance,
  FastifyPluginAsync,
  FastifyReply,
  FastifyRequest,
  RouteOptions
} from 'fastify'
import fp from 'fastify-plugin'
import type { Http2Stream } from 'node:http2'
import type { Readable } from 'node:stream'
import type { FastifyDigestFieldsOptions } from '../types/index.js'
import { hasNoDigestFields, inspectFields } from './fields.js'
import { pluginSettings, routeSettings, type Settings } from './options.js'
import { DigestProblem, missingIntegrityField, unverifiableContent } from './problems.js'
import { compareDigests, DigestVerifier } from './verifier.js'

export type * from '../types/index.js'
export {
  DigestProblem,
  digestProblemSchemas,
  generalProblemSchema,
  invalidValueSchema,
  mismatchingValueSchema,
  unsupportedAlgorithmSchema
} from './problems.js'

const kSettings = Symbol('fastify-digest-fields.settings')
const kVerifier = Symbol('fastify-digest-fields.verifier')

// Per-route settings and per-request state live behind symbols, out of the public types.
type RouteConfig = FastifyContextConfig & { [kSettings]?: Settings }
type DigestRequest = FastifyRequest & { [kVerifier]?: DigestVerifier | null }

function settingsOf (request: FastifyRequest): Settings | undefined {
  return (request.routeOptions.config as RouteConfig)[kSettings]
}

type PreParsingDone = (error?: Error | null, payload?: Readable) => void

/** Whether the request carries content, judged from its framing alone (RFC 9112 section 6.3). */
function hasContent (request: FastifyRequest): boolean {
  const length = request.headers['content-length']
  if (length !== undefined) return length !== '0'
  if (request.headers['transfer-encoding'] !== undefined) return true
  // Without either an HTTP/1 request has no content; HTTP/2 frames content in DATA frames, and a
  // request has none when its HEADERS frame ended the stream (RFC 9113 section 8.1).
  const { stream } = request.raw as { stream?: Http2Stream }
  return stream !== undefined && !stream.endAfterHeaders
}

/**
 * Judges the fields of a request to a covered route, then checks an empty body at once or hands the
 * parser a stream that verifies the body as it reads it.
 */
function verify (request: DigestRequest, settings: Settings, payload: Readable, done: PreParsingDone): void {
  const headers = request.headers
  let inspection
  try {
    inspection = inspectFields(headers, settings, headers['content-range'] !== undefined)
  } catch (error) {
    done(error as DigestProblem)
    return
  }
  const { expectations, algorithms } = inspection
  const content = hasContent(request)
  if (expectations.length === 0) {
    done(settings.required && content ? missingIntegrityField(settings) : null, payload)
    return
  }
  if (!content) {
    // The digest of empty content is well defined, and checking it here needs no stream at all:
    // Fastify skips body parsing for an empty request, so nothing would ever read one.
    try {
      request.digest = compareDigests(settings, expectations, algorithms, algorithms.map((algorithm) => algorithm.emptyDigest))
    } catch (error) {
      done(error as DigestProblem)
      return
    }
    done(null, payload)
    return
  }
  const verifier = new DigestVerifier(payload, settings, expectations, algorithms, request)
  request[kVerifier] = verifier
  done(null, verifier)
}

/**
 * Asked just before the handler runs. Content that the payload stream never delivered was read some
 * other way (from request.raw, as @fastify/multipart does) or not at all: it was not verified, and
 * the handler must not take it as if it were. A stream the parser handed on as the body is fine:
 * it errors instead of ending if the digests differ.
 */
function isUnverified (request: DigestRequest): boolean {
  const verifier = request[kVerifier]
  return verifier != null && !verifier.settled && !verifier.started && request.body !== verifier
}

function sendProblem (problem: DigestProblem, request: FastifyRequest, reply: FastifyReply): void {
  request.log.info({ problemType: problem.type }, problem.message)
  reply
    .code(problem.statusCode)
    .headers(problem.headers)
    .type('application/problem+json')
    // As a Buffer, so Fastify sends the media type as registered: JSON defines no charset parameter
    // (RFC 8259 section 11).
    .send(Buffer.from(reply.serializeInput(problem.document, problem.schema)))
}

function routeName (route: RouteOptions): string {
  return `${Array.isArray(route.method) ? route.method.join(',') : route.method} ${route.url}`
}

const plugin: FastifyPluginAsync<FastifyDigestFieldsOptions> = async (fastify: FastifyInstance, options) => {
  const defaults = pluginSettings(options)
  // While no route requires a field, a request without one is done with after four header lookups.
  let anyRequired = false

  fastify.decorateRequest('digest', null)
  fastify.decorateRequest(kVerifier, null)

  fastify.addHook('onRoute', (route) => {
    const settings = routeSettings(defaults, route.config?.digest, routeName(route))
    if (settings === null) return
    anyRequired ||= settings.required
    const config: RouteConfig = { ...route.config, [kSettings]: settings }
    route.config = config

    // A route-level error handler answers the plugin's problems and hands every other error on to
    // the application's handler (Fastify chains to the scope's handler when this one rethrows), so
    // the application keeps setErrorHandler to itself.
    const routeErrorHandler = route.errorHandler
    route.errorHandler = function digestErrorHandler (this: FastifyInstance, error: FastifyError, request, reply) {
      if (error instanceof DigestProblem) return sendProblem(error, request, reply)
      if (routeErrorHandler !== undefined) return routeErrorHandler.call(this, error, request, reply)
      throw error
    }

    // The unverified-content check wraps the handler rather than adding a preHandler hook: it then
    // runs after every hook, and a request without digest fields pays one property read for it.
    const handler = route.handler
    route.handler = function digestCheckedHandler (this: FastifyInstance, request, reply) {
      if (isUnverified(request)) throw unverifiableContent(settings)
      return handler.call(this, request, reply)
    }
  })

  // A scope-level hook runs before every route-level one, so the verifier sees the bytes as they
  // arrived even when @fastify/compress adds its decompressing preParsing hook to the route: both
  // digests cover the content before any content coding is removed (RFC 9530 sections 2 and 3).
  fastify.addHook('preParsing', (request: DigestRequest, _reply, payload, done: PreParsingDone) => {
    const noFields = hasNoDigestFields(request.headers)
    if (noFields && !anyRequired) {
      done(null, payload)
      return
    }
    const settings = settingsOf(request)
    if (settings === undefined || (noFields && !settings.required)) {
      done(null, payload)
      return
    }
    verify(request, settings, payload, done)
  })
}

export const fastifyDigestFields = fp(plugin, { fastify: '5.x', name: 'fastify-digest-fields' })
export default fastifyDigestFields
