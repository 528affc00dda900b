// An upload API that checks Content-Digest and Repr-Digest on every request: `npm start`.
import { createReadStream, realpathSync } from 'node:fs'
import { mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import Fastify from 'fastify'
import fastifyDigestFields from 'fastify-digest-fields'

// A stored file name: letters, digits, '_', '-' and '.', never starting with '.', so that no name
// can leave the upload folder or clash with the temporary files.
const fileName = { type: 'string', pattern: '^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$' }

export async function buildServer ({ uploadDir, logger = true } = {}) {
  const app = Fastify({ logger })
  await app.register(fastifyDigestFields, { algorithms: ['sha-256', 'sha-512'] })

  const items = new Map()
  // The digests verified at upload, by file name: downloads answer Want-Repr-Digest with them
  // instead of hashing the file again.
  const stored = new Map()

  // JSON: the body is parsed only once its digest has matched. The same route answers problems in
  // the shape registered with IANA under /registered.
  const addItem = async (request, reply) => {
    const id = String(items.size + 1)
    items.set(id, request.body)
    return reply.code(201).send({ id, item: request.body, verified: describe(request.digest) })
  }
  app.post('/items', addItem)
  app.post('/registered/items', { config: { digest: { problemTypes: 'registered' } } }, addItem)

  // Streaming: the content goes from request.raw to a temporary file of its own, whatever its
  // content type (this scope's only parser reads nothing), and the file is kept only when the
  // whole request verified (request.verifiedFiles()). An integrity field is required here.
  await app.register(async (uploads) => {
    uploads.removeAllContentTypeParsers()
    uploads.addContentTypeParser('*', (_request, _payload, done) => done(null))
    uploads.put('/uploads/:name', {
      config: { digest: { required: true } },
      schema: { params: { type: 'object', properties: { name: fileName }, required: ['name'] } }
    }, async (request, reply) => {
      // Written beside its destination, and moved into place only once the content verified.
      const files = request.verifiedFiles()
      await files.save(request.raw, join(uploadDir, request.params.name))
      // `required` lets an empty upload without an integrity field through: nothing was verified.
      if (await request.digestVerdict() === null) {
        await files.discard()
        return reply.code(400).send({ error: 'Bad Request', message: 'an upload must carry a Content-Digest or Repr-Digest field' })
      }
      await files.commit()
      stored.set(request.params.name, request.digest.values)
      return reply.code(201).send({ name: request.params.name, verified: describe(request.digest) })
    })

    // Streams a stored file (and, through Fastify's HEAD route, its headers alone) with the digest
    // stored at upload as Unencoded-Digest, which browsers check, and as Repr-Digest when the
    // client asks for it.
    uploads.get('/uploads/:name', {
      config: { digest: { responseDigests: ['unencoded-digest'] } },
      schema: { params: { type: 'object', properties: { name: fileName }, required: ['name'] } }
    }, async (request, reply) => {
      const digests = stored.get(request.params.name)
      if (digests === undefined) return reply.code(404).send({ error: 'Not Found', message: 'no such upload' })
      return reply.reprDigest(digests).type('application/octet-stream').send(createReadStream(join(uploadDir, request.params.name)))
    })
  })

  app.get('/health', { config: { digest: false } }, async () => ({ status: 'ok' }))

  return app
}

function describe (digest) {
  if (digest === null) return null
  return {
    fields: digest.fields,
    values: Object.fromEntries(Object.entries(digest.values).map(([key, value]) => [key, `:${value.toString('base64')}:`]))
  }
}

// Run directly (npm start), not imported: compared as real paths, so that a checkout path with
// spaces or symbolic links still starts the server.
if (process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const uploadDir = await mkdtemp(join(tmpdir(), 'digest-uploads-'))
  const app = await buildServer({ uploadDir })
  await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 3000) })
  app.log.info(`uploads are kept in ${uploadDir}`)
}
