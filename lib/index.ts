// fastify-digest-fields: RFC 9530 digest fields on a Fastify server. Where a request goes:
//   onRoute        the route's settings, normalized once (options/); the response hooks and the
//                  error handler that answers problems (problems/error-handler.ts) added to the route
//   arrival        Expect: 100-continue answered only once the content is read (request/continue.ts)
//   onRequest      judgeContentAtSource: fields judged before any content (request/judge-fields.ts,
//                  findings.ts), or the common case found in a few lookups and verified in one small
//                  object (request/common-case.ts); an upload's running digest started or loaded
//                  (uploads/resumable.ts); request.raw taken over (request/verification.ts,
//                  verifier.ts, source.ts), or its end watched for trailer fields (trailer-watch.ts)
//   as it arrives  each chunk hashed (request/content-hashes.ts, fields/unencoded.ts), the tail held
//                  back (fields/held-content.ts); at the end, digests compared (request/verdict.ts),
//                  then the end delivered or the stream failed with the problem
//   preValidation  awaitPartialReaders: a parser that read part of the content waits for the verdict
//   onSend         holdSuccessReplies: a success reply waits for the verdict and goes as it was sent
//                  (response/one-send.ts), a failure becomes the problem, a payload not sent is
//                  destroyed; every such wait bounded by the route's stallTimeout (request/content-wait.ts)
//   problems       rendered from findings (problems/problems.ts), sent by problems/answer.ts
//   responses      the route's first onSend and its last around its own, one send of a reply at a
//                  time (response/route-hooks.ts): Unencoded-Digest found in the first, before a
//                  coding is added; Want-* answered, digests found and signed in the last, placed in
//                  the turn Fastify writes the reply (response/digests.ts, sent-fields.ts, fields.ts,
//                  coverage.ts, payload-digests.ts, continue-send.ts); files' digests kept by version
//                  (response/file-digests.ts), signatures made (options/integrity-signatures.ts)
//   commits        request.verifiedFiles() and digestVerdict() (uploads/commit.ts); files saved and
//                  not committed removed before any answer goes (holdSuccessReplies)
// docs/development.md has the folders, what each owns and may import.
import type {
  FastifyContextConfig,
  FastifyInstance,
  FastifyPluginAsync,
  FastifyReply,
  FastifyRequest,
  RouteOptions
} from 'fastify'
import fp from 'fastify-plugin'
import type { Readable } from 'node:stream'
import type { FastifyDigestFieldsOptions } from './types.js'
import { decorate } from './decorations.js'
import { kPendingContent, kRouteSettings } from './symbols.js'
import { declaredBeforeRegistration } from './warnings.js'
import { fileDigestLimits, pluginSettings, routeSettings, type Settings } from './options/settings.js'
import { answerWith } from './problems/answer.js'
import { answerProblems } from './problems/error-handler.js'
import { DigestProblem } from './problems/problems.js'
import { CommonCaseVerifier, commonCase } from './request/common-case.js'
import { deferContinue } from './request/continue.js'
import { digestFieldsOf } from './request/judge-fields.js'
import type { PendingContent } from './request/pending-content.js'
import { TrailerWatch, watchTrailers } from './request/trailer-watch.js'
import { verifyRequest, type RequestHook } from './request/verification.js'
import { continueSend, type SendDone } from './response/continue-send.js'
import { FileDigests } from './response/file-digests.js'
import { answersError, asSent, dropLaterSend, dropPayload, holdSend, isHeld } from './response/one-send.js'
import { addResponseHooks } from './response/route-hooks.js'
import { discardUncommitted } from './uploads/commit.js'
import { isUploadRequest, startUpload } from './uploads/resumable.js'

export type * from './types.js'
export type * from './problems/documents.js'
export { DigestProblem } from './problems/problems.js'
export { staticFileDigests } from './response/static-files.js'
export { uploadFieldsOf, type UploadFields } from './uploads/upload-fields.js'
export {
  digestProblemSchemas,
  generalProblemSchema,
  invalidValueSchema,
  invalidValuesSchema,
  mismatchedValuesSchema,
  mismatchingValueSchema,
  unsupportedAlgorithmSchema,
  unsupportedAlgorithmsSchema
} from './problems/schemas.js'

// Per-route settings and per-request state live behind symbols, out of the public types. A route's
// settings are null when `config.digest` is false, and absent when the plugin never saw the route.
type RouteConfig = FastifyContextConfig & { [kRouteSettings]?: Settings | null }
type DigestRequest = FastifyRequest & { [kPendingContent]?: PendingContent | null }

/** A body that a parser handed on as a stream, for the handler to read (and see the error in). */
function isStream (body: unknown): boolean {
  return typeof (body as Readable | undefined)?.pipe === 'function'
}

/** A reply, once the files saved and not committed are removed. */
function sendCommitted (request: FastifyRequest, payload: unknown, done: SendDone): void {
  const removing = discardUncommitted(request)
  if (removing === null) continueSend(done, payload)
  else removing.then(() => { continueSend(done, payload) })
}

/**
 * A success reply once its content concluded, as it was sent (a held one, response/one-send.ts): sent
 * as it is, or as the problem the content failed with, its payload then not sent.
 */
function sendOnVerdict (failure: Error | null, request: FastifyRequest, reply: FastifyReply, payload: unknown,
  done: SendDone): void {
  if (failure === null) {
    asSent(reply)
    sendCommitted(request, payload, done)
    return
  }
  dropPayload(payload)
  if (failure instanceof DigestProblem) {
    // Also when the handler caught the problem from digestVerdict() and replied anyway.
    asSent(reply)
    sendCommitted(request, answerWith(failure, request, reply), done)
  }
  // A request whose client left, or that was ended for standing still, is answered by nobody.
}

function routeName (route: RouteOptions): string {
  return `${Array.isArray(route.method) ? route.method.join(',') : route.method} ${route.url}`
}

const plugin: FastifyPluginAsync<FastifyDigestFieldsOptions> = async (fastify: FastifyInstance, options) => {
  // Fastify's own register options reach the plugin with its options; they are Fastify's to apply.
  const { prefix, logLevel, logSerializers, ...digestOptions } =
    options as FastifyDigestFieldsOptions & Record<string, unknown>
  const defaults = pluginSettings(digestOptions)
  const files = new FileDigests(fileDigestLimits(digestOptions))
  // While no route requires a field, a request without one is done with after seven header lookups.
  let anyRequired = defaults.required
  // Upload creations and appends are followed whatever fields they carry.
  let anyResumable = false
  // Routes declared before the plugin was registered, each reported once.
  const unseen = new WeakSet<object>()

  /**
   * A route's settings. One the plugin did not see declared (declared before the plugin finished
   * registering, or the not-found handler) is verified with the plugin defaults, never passed.
   */
  function settingsOf (request: FastifyRequest): Settings | null {
    const config = request.routeOptions.config as RouteConfig
    const settings = config[kRouteSettings]
    if (settings !== undefined) return settings
    if (!request.is404 && !unseen.has(config)) {
      unseen.add(config)
      request.log.warn(declaredBeforeRegistration(request.method, request.routeOptions.url))
    }
    return defaults
  }

  deferContinue(fastify.server)

  // A second registration in a child scope sets that scope's defaults: its onRoute hook runs after
  // the parent's, and the first onRequest hook to see a request does the work.
  if (!fastify.hasRequestDecorator('digest')) decorate(fastify)

  fastify.addHook('onRoute', (route) => {
    const settings = routeSettings(defaults, route.config?.digest, routeName(route))
    route.config = { ...route.config, [kRouteSettings]: settings } as RouteConfig
    if (settings === null) return
    anyRequired ||= settings.required
    anyResumable ||= settings.resumable !== null
    // Unencoded-Digest found first, before a route hook adds a coding; the other digests last.
    addResponseHooks(route, settings, files)
    // A route-level error handler answers the plugin's problems and hands every other error on.
    answerProblems(route, answersError)
  })

  // The fields are judged, and the content taken over at its source, as soon as the route is known:
  // an asynchronous onRequest hook after this one (@fastify/multipart has one) lets the connection
  // deliver content, which must already pass through the verifier.
  fastify.addHook('onRequest', function judgeContentAtSource (request: DigestRequest, reply, done) {
    const { headers } = request
    const fields = digestFieldsOf(headers)
    const noFields = fields === 'none'
    // A parent scope's registration ran first: content it took over stays with it, a mere watch
    // for trailer fields gives way to this scope's settings.
    const prior = request[kPendingContent]
    const watch = prior instanceof TrailerWatch
    if ((prior != null && !watch) || request.digest !== null) {
      done()
      return
    }
    if (watch) prior.detach()
    if (noFields && !anyRequired && !anyResumable) {
      request[kPendingContent] = watchTrailers(request, reply, settingsOf)
      done()
      return
    }
    const settings = settingsOf(request)
    const resumable = settings?.resumable == null || !isUploadRequest(headers) ? null : settings.resumable
    if (settings === null || (noFields && !settings.required && resumable === null)) {
      request[kPendingContent] = settings === null ? null : watchTrailers(request, reply, settingsOf)
      done()
      return
    }
    const expected = resumable === null && fields === 'one' ? commonCase(request, settings) : null
    if (expected !== null) {
      request[kPendingContent] = new CommonCaseVerifier(request, reply, settings, expected)
      done()
      return
    }
    const hook: RequestHook = { settingsOf, attached (pending) { request[kPendingContent] = pending }, done }
    if (resumable === null) {
      verifyRequest(request, reply, settings, hook, null)
      return
    }
    // The upload's state may have to be loaded: content that arrives meanwhile waits unread.
    startUpload(request, settings, resumable).then((upload) => {
      if (upload instanceof DigestProblem) return done(upload)
      request.resumableUpload = upload
      verifyRequest(request, reply, settings, hook, { running: upload })
    }, done)
  })

  // After the parser: a parser that took part of the content and handed no stream on (one that
  // sniffs the first chunk) must not let any later hook or the handler act on content whose
  // digest is not known yet, so the rest is read here and the request goes on once it matched.
  // Content nobody has read yet is left for the handler, which sees the error in place of the end.
  fastify.addHook('preValidation', function awaitPartialReaders (request: DigestRequest, _reply, done) {
    const verifier = request[kPendingContent]
    if (verifier == null || verifier.settled || !verifier.covered || !request.raw.readableDidRead || isStream(request.body)) {
      done()
      return
    }
    // A request whose client left is answered by nobody.
    verifier.whenSettled((failure) => {
      if (failure === null || failure instanceof DigestProblem) done(failure ?? undefined)
    }, 'all')
  })

  // Before a reply leaves: a reader can end on its own framing before the content ends (a multipart
  // part followed by an epilogue, a compressed stream followed by more bytes) and the handler reply
  // on it. A success reply then waits for the verdict, and a failure turns it into the problem, so
  // that no client is told that content whose digest failed was taken.
  fastify.addHook('onSend', function holdSuccessReplies (request: DigestRequest, reply, payload, done) {
    // Fastify alone would have written the send that waits: a later one is not sent.
    if (isHeld(reply)) {
      dropLaterSend(request, reply, payload)
      return
    }
    const verifier = request[kPendingContent]
    // An error answer (Fastify's 413 among them) claims nothing about the content: it goes as it is.
    if (reply.statusCode >= 400 || verifier == null || !verifier.covered) {
      sendCommitted(request, payload, done)
      return
    }
    if (verifier.settled) {
      sendOnVerdict(verifier.failure, request, reply, payload, done)
      return
    }
    holdSend(reply, payload)
    verifier.whenSettled((failure) => { sendOnVerdict(failure, request, reply, payload, done) }, 'paused')
  })
}

export const fastifyDigestFields = fp(plugin, { fastify: '5.x || 6.x', name: 'fastify-digest-fields' })
export default fastifyDigestFields
