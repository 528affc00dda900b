import { generateKeyPairSync } from 'node:crypto'
import type { Stats } from 'node:fs'
import Fastify, { type FastifyContextConfig, type FastifyPluginAsync, type FastifyReply, type RouteShorthandOptions } from 'fastify'
import { expectAssignable, expectError, expectNotAssignable, expectType } from 'tsd'
import fastifyDigestFields, {
  digestProblemSchemas,
  DigestProblem,
  fastifyDigestFields as named,
  staticFileDigests,
  type DigestProblemDocument,
  type DigestRouteConfig,
  type DigestRouteOptions,
  type ResumableUpload,
  type ResumableUploadOptions,
  type DraftProblemDocument,
  type RegisteredProblemDocument,
  type FastifyDigestFieldsOptions,
  type CommittedFiles,
  type SavedFile,
  type VerifiedDigest
} from 'fastify-digest-fields'

const app = Fastify()

expectType<typeof fastifyDigestFields>(named)
expectAssignable<FastifyPluginAsync<FastifyDigestFieldsOptions>>(fastifyDigestFields)

app.register(fastifyDigestFields)
app.register(fastifyDigestFields, { algorithms: ['sha-512', 'sha-256'] })
app.register(fastifyDigestFields, {
  algorithms: { 'sha-256': 10, md5: 1 },
  strictAlgorithms: true,
  required: true,
  disclosure: 'no-calculated-digest',
  problemTypes: 'registered',
  problemTypesBase: 'https://example.com/problems'
})
expectError(app.register(fastifyDigestFields, { problemTypes: 'draft-06' }))
app.register(fastifyDigestFields, { responseDigests: ['repr-digest', 'content-digest'] })
expectError(app.register(fastifyDigestFields, { responseDigests: ['digest'] }))
app.register(fastifyDigestFields, { responseDigests: ['unencoded-digest'], fileDigests: { hashBeforeSending: 1024, maxEntries: 10 } })
app.register(fastifyDigestFields, { integritySignatures: { privateKey: generateKeyPairSync('ed25519').privateKey } })
app.register(fastifyDigestFields, { integritySignatures: { privateKey: '-----BEGIN PRIVATE KEY-----' } })
expectError(app.register(fastifyDigestFields, { integritySignatures: { key: 'pem' } }))
expectError(app.register(fastifyDigestFields, { fileDigests: { hashBeforeSending: '4 MiB' } }))
app.get('/unsigned', { config: { digest: { integritySignatures: false, responseDigests: ['unencoded-digest'] } } }, async () => 'ok')
expectError(app.get('/x', { config: { digest: { fileDigests: { maxEntries: 1 } } } satisfies FastifyContextConfig }, async () => 'ok'))
const setHeaders = staticFileDigests({ responseDigests: ['unencoded-digest'], setHeaders: (reply, path, stat) => { reply.header('x-size', stat.size); expectType<string>(path) } })
expectType<(reply: FastifyReply, path: string, stat: Stats) => void>(setHeaders)
expectError(staticFileDigests({ responseDigests: ['digest'] }))
app.get('/download', async (_request, reply) => {
  expectType<typeof reply>(reply.reprDigest({ 'sha-256': Buffer.alloc(32) }))
  expectError(reply.reprDigest({ crc32c: Buffer.alloc(4) }))
  return 'ok'
})
expectError(app.register(fastifyDigestFields, { algorithms: ['sha-1'] }))
expectError(app.register(fastifyDigestFields, { disclosure: 'some' }))
expectError(app.register(fastifyDigestFields, { required: 'yes' }))

app.put('/items/:id', { config: { digest: { algorithms: ['sha-512'] } } }, async (request) => {
  expectType<VerifiedDigest | null>(request.digest)
  const sha512 = request.digest?.values['sha-512']
  expectType<Buffer | undefined>(sha512)
  expectType<readonly ('content-digest' | 'repr-digest' | 'unencoded-digest')[] | undefined>(request.digest?.fields)
  expectType<Buffer | undefined>(request.digest?.unencoded['sha-256'])
  const files = request.verifiedFiles()
  const saved = await files.save(request.raw, '/tmp/item')
  expectType<SavedFile>(saved)
  expectType<number>(saved.size)
  expectType<'sha-256' | 'sha-512' | 'md5' | 'sha'>(saved.algorithm)
  expectType<Buffer>(saved.digest)
  const committed = await files.commit()
  expectType<CommittedFiles>(committed)
  expectType<VerifiedDigest | null>(committed.digest)
  expectType<readonly SavedFile[]>(committed.files)
  return 'ok'
})
app.get('/health', { config: { digest: false } }, async () => 'ok')
// Route shorthands and app.route() infer the route's config type from the object and intersect it
// with FastifyContextConfig: a known setting of the wrong type is an error there...
expectError(app.post('/wrong-type', { config: { digest: { disclosure: 'some' } } }, async () => 'ok'))
expectError(app.post('/wrong-type', { config: { digest: { required: 'yes' } } }, async () => 'ok'))
// ...but an unknown key, `digest: true` or an unknown algorithm key is not (the plugin throws when
// the route is declared). These lines compile, as the README says.
app.post('/unknown-key', { config: { digest: { requird: true } } }, async () => 'ok')
app.route({ method: 'POST', url: '/true', config: { digest: true }, handler: async () => 'ok' })
app.post('/unknown-algorithm', { config: { digest: { algorithms: ['sha-1'] } } }, async () => 'ok')
// `satisfies FastifyContextConfig`, or a typed options object, checks all of it.
expectError(app.post('/x', { config: { digest: { requird: true } } satisfies FastifyContextConfig }, async () => 'ok'))
expectError(app.post('/x', { config: { digest: true } satisfies FastifyContextConfig }, async () => 'ok'))
expectError(app.post('/x', { config: { digest: { algorithms: ['sha-1'] } } satisfies FastifyContextConfig }, async () => 'ok'))
expectNotAssignable<RouteShorthandOptions>({ config: { digest: true } })
expectNotAssignable<RouteShorthandOptions>({ config: { digest: { algorithms: ['sha-1'] } } })
app.post('/typed', { config: { digest: { required: true } } } satisfies RouteShorthandOptions, async () => 'ok')
expectAssignable<DigestRouteOptions>({ problemLogLevel: 'warn' })

// Resumable uploads: a route option only, whose loadState gives back what state() gave.
const resumable: ResumableUploadOptions = { loadState: async (request) => request.headers['x-state'] as string | undefined }
app.patch('/uploads/:id', { config: { digest: { resumable } } }, async (request) => {
  expectType<ResumableUpload | null>(request.resumableUpload)
  const upload = request.resumableUpload
  if (upload !== null) {
    expectType<string>(upload.state())
    expectType<number>(upload.offset)
    expectType<boolean>(upload.complete)
    expectType<boolean>(upload.failed)
    expectType<boolean>(upload.creation)
    expectType<Buffer | undefined>(upload.digests()['sha-256'])
  }
  return 'ok'
})
expectAssignable<DigestRouteConfig>({ resumable: { loadState: () => null } })
expectAssignable<DigestRouteConfig>({ resumable: { creation: true } })
expectNotAssignable<DigestRouteConfig>({ resumable: { creation: true, loadState: () => null } })
expectNotAssignable<DigestRouteConfig>({ resumable: {} })
expectNotAssignable<DigestRouteConfig>({ resumable: { creation: 'yes' } })
expectNotAssignable<DigestRouteConfig>({ resumable: { loadState: () => 42 } })
expectError(app.register(fastifyDigestFields, { resumable }))
expectError(app.patch('/x', { config: { digest: { resumable: {} } } satisfies FastifyContextConfig }, async () => 'ok'))
expectNotAssignable<DigestRouteOptions>({ problemLogLevel: 'notice' })
expectAssignable<FastifyContextConfig>({ digest: { strictAlgorithms: true } })
expectNotAssignable<FastifyContextConfig>({ digest: true })
expectNotAssignable<FastifyContextConfig>({ digest: { problemTypesBase: 'https://example.com' } })

expectAssignable<DigestRouteOptions>({ required: true })
expectNotAssignable<DigestRouteOptions>({ disclosure: 'partial' })

expectType<'digest-mismatching-value'>(digestProblemSchemas.mismatchingValue.title)
const problem = new DigestProblem('t', 'm', { type: 'about:blank', title: 'Bad Request' }, digestProblemSchemas.general)
expectType<number>(problem.statusCode)
expectType<DigestProblemDocument>(problem.document)
expectAssignable<DigestProblemDocument>({
  type: 'https://iana.org/assignments/http-problem-types#digest-mismatched-values',
  title: 'Mismatched Digest Values',
  mismatched_digests: [{ algorithm: 'sha-256', provided_digest: ':AAAA:', header: 'Content-Digest' }]
} satisfies RegisteredProblemDocument)
expectAssignable<DraftProblemDocument>({ type: 'about:blank', title: 'Bad Request', detail: 'why' })
expectAssignable<FastifyContextConfig>({ digest: { problemTypes: 'registered' } })
expectType<'digest-mismatched-values'>(digestProblemSchemas.mismatchedValues.title)
