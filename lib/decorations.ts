/** What the plugin adds to Fastify's requests and replies: the public methods, and its state behind symbols. */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { lookupAlgorithm, type Algorithm } from './fields/algorithms.js'
import type { Settings } from './options/settings.js'
import { digestVerdict, VerifiedFiles } from './uploads/commit.js'
import { invalidOption, unverifiedRoute } from './errors.js'
import { replyState, type SuppliedDigests } from './response/reply-state.js'
import { kPendingContent, kReplyState, kRouteSettings, kVerifiedFiles } from './symbols.js'

// false once the reply went without any: files asked for later can only be refused.
type FilesRequest = FastifyRequest & { [kVerifiedFiles]?: VerifiedFiles | null | false }

/** Decorates a Fastify instance once, whichever registration comes first. */
export function decorate (fastify: FastifyInstance): void {
  fastify.decorateRequest('digest', null)
  fastify.decorateRequest(kPendingContent, null)
  fastify.decorateRequest(kVerifiedFiles, null)
  fastify.decorateRequest('resumableUpload', null)
  fastify.decorateRequest('digestVerdict', function (this: FastifyRequest) { return digestVerdict(this) })
  fastify.decorateRequest('verifiedFiles', function (this: FilesRequest) {
    // Files committed on a route the plugin does not verify would be unverified content.
    if ((this.routeOptions.config as { [kRouteSettings]?: unknown })[kRouteSettings] === null) {
      throw unverifiedRoute('request.verifiedFiles()')
    }
    const files = this[kVerifiedFiles]
    if (files instanceof VerifiedFiles) return files
    const settings = (this.routeOptions.config as { [kRouteSettings]?: Settings })[kRouteSettings]
    const algorithm = settings?.algorithms.values().next().value ?? lookupAlgorithm('sha-256') as Algorithm
    return (this[kVerifiedFiles] = new VerifiedFiles(this, algorithm, files === false))
  })
  fastify.decorateReply(kReplyState, null)
  fastify.decorateReply('reprDigest', function reprDigest (this: FastifyReply, digests: SuppliedDigests) {
    if (typeof digests !== 'object' || digests === null || Array.isArray(digests)) {
      throw invalidOption('reply.reprDigest', 'takes an object of digests by algorithm')
    }
    // Any Uint8Array of the digest's length: what crypto and Web Crypto give alike.
    const checked: Record<string, Buffer> = {}
    for (const [key, value] of Object.entries(digests) as Array<[string, unknown]>) {
      const algorithm = lookupAlgorithm(key)
      if (algorithm === undefined || !(value instanceof Uint8Array) || value.length !== algorithm.length) {
        throw invalidOption('reply.reprDigest', `${key} must be a Buffer of the digest's length`)
      }
      checked[key] = Buffer.from(value.buffer, value.byteOffset, value.byteLength)
    }
    replyState(this).supplied = checked
    return this
  })
}
