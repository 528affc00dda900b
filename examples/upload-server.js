// An upload API that checks Content-Digest and Repr-Digest on every request: `npm start`.
import { createWriteStream } from 'node:fs'
import { mkdtemp, rename, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pipeline } from 'node:stream/promises'
import Fastify from 'fastify'
import fastifyDigestFields from 'fastify-digest-fields'

export async function buildServer ({ uploadDir, logger = true } = {}) {
  const app = Fastify({ logger })
  await app.register(fastifyDigestFields, { algorithms: ['sha-256', 'sha-512'] })

  // Hand octet-stream bodies to the handler as the verifying stream itself, so that a large upload
  // is never held in memory.
  app.addContentTypeParser('application/octet-stream', (_request, payload, done) => done(null, payload))

  const items = new Map()

  // JSON: the body is parsed only once its digest has matched.
  app.post('/items', async (request, reply) => {
    const id = String(items.size + 1)
    items.set(id, request.body)
    return reply.code(201).send({ id, item: request.body, verified: describe(request.digest) })
  })

  // Streaming: written to a temporary file, kept only if the stream ends, which it does only when
  // the digest matched. An integrity field is required here.
  app.put('/uploads/:name', { config: { digest: { required: true } } }, async (request, reply) => {
    const name = request.params.name.replace(/[^\w.-]/g, '_')
    const partial = join(uploadDir, `.${name}.partial`)
    try {
      await pipeline(request.body, createWriteStream(partial))
    } catch (error) {
      await rm(partial, { force: true })
      throw error
    }
    await rename(partial, join(uploadDir, name))
    return reply.code(201).send({ name, verified: describe(request.digest) })
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

if (import.meta.url === `file://${process.argv[1]}`) {
  const uploadDir = await mkdtemp(join(tmpdir(), 'digest-uploads-'))
  const app = await buildServer({ uploadDir })
  await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 3000) })
  app.log.info(`uploads are kept in ${uploadDir}`)
}
