import { createHash } from 'node:crypto'
import { createReadStream, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { brotliDecompressSync, gunzipSync, gzipSync, inflateSync } from 'node:zlib'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyCompress from '@fastify/compress'
import { request } from 'undici'
import fastifyDigestFields, { type FastifyDigestFieldsOptions } from '../../lib/index.js'
import { listen, seededBytes } from '../helpers.js'

// Unencoded-Digest on responses (draft-ietf-httpbis-unencoded-digest; response-digests.md): the
// digest of the representation with every content coding removed. The oracle decodes the bytes
// the client received with zlib and hashes them, whatever coded them.

const sha256 = (data: string | Buffer): string => `sha-256=:${createHash('sha256').update(data).digest('base64')}:`
const sha512 = (data: string | Buffer): string => `sha-512=:${createHash('sha512').update(data).digest('base64')}:`
const decode: Record<string, (data: Buffer) => Buffer> = {
  identity: (data) => data,
  gzip: gunzipSync,
  br: brotliDecompressSync,
  deflate: inflateSync
}

const folder = mkdtempSync(join(tmpdir(), 'unencoded-responses-'))
t.teardown(() => rmSync(folder, { recursive: true, force: true }))
const fileContent = seededBytes(48 * 1024, 17).toString('base64')
const filePath = join(folder, 'file.txt')
writeFileSync(filePath, fileContent)
const text = 'a representation that is long enough to be compressed by @fastify/compress, '.repeat(40)

function routes (app: FastifyInstance): void {
  app.get('/string', async (_request, reply) => reply.type('text/plain').send(text))
  app.get('/buffer', async (_request, reply) => reply.type('application/octet-stream').send(Buffer.from(text)))
  app.get('/object', async () => ({ text }))
  app.get('/stream', async (_request, reply) => reply.type('text/plain').send(Readable.from([text.slice(0, 100), text.slice(100)])))
  app.get('/file', async (_request, reply) => reply.type('text/plain').send(createReadStream(filePath)))
  // Content the application coded itself: the digest is of the decoded bytes.
  app.get('/coded-buffer', async (_request, reply) => reply.type('text/plain').header('content-encoding', 'gzip').send(gzipSync(text)))
  app.get('/coded-stream', async (_request, reply) => reply.type('text/plain').header('content-encoding', 'gzip').send(Readable.from([gzipSync(text)])))
  app.get('/empty', async (_request, reply) => reply.code(204).send())
  app.get('/supplied-part', async (_request, reply) => {
    reply.reprDigest({ 'sha-256': createHash('sha256').update(text).digest() })
    return reply.code(206).type('text/plain').header('content-range', `bytes 0-9/${text.length}`).send(text.slice(0, 10))
  })
}

const expected: Record<string, string> = {
  '/string': text,
  '/buffer': text,
  '/object': JSON.stringify({ text }),
  '/stream': text,
  '/file': fileContent,
  '/coded-buffer': text,
  '/coded-stream': text
}

async function server (options: FastifyDigestFieldsOptions, compress: 'none' | 'before' | 'after'): Promise<FastifyInstance> {
  const app = Fastify()
  if (compress === 'before') await app.register(fastifyCompress, { threshold: 0 })
  await app.register(fastifyDigestFields, options)
  if (compress === 'after') await app.register(fastifyCompress, { threshold: 0 })
  routes(app)
  return app
}

for (const compress of ['none', 'before', 'after'] as const) {
  t.test(`Want-Unencoded-Digest on every payload, @fastify/compress ${compress === 'none' ? 'absent' : `registered ${compress} the plugin`}`, async (t) => {
    const app = await server({}, compress)
    t.teardown(() => app.close())
    const port = await listen(app)
    for (const encoding of compress === 'none' ? ['identity'] : ['identity', 'gzip', 'br', 'deflate']) {
      for (const [path, content] of Object.entries(expected)) {
        const response = await request(`http://127.0.0.1:${port}${path}`, { headers: { 'want-unencoded-digest': 'sha-512=3, sha-256=9', 'accept-encoding': encoding } })
        const body = Buffer.from(await response.body.arrayBuffer())
        const coding = String(response.headers['content-encoding'] ?? 'identity')
        const decoded = (decode[coding] as (data: Buffer) => Buffer)(body)
        t.equal(decoded.toString(), content, `${path} ${encoding}: the client got the representation`)
        const where = path === '/stream' || path === '/coded-stream' ? response.trailers : response.headers
        t.equal(where['unencoded-digest'], sha256(decoded), `${path} ${encoding} (${coding}): Unencoded-Digest is of the decoded bytes`)
        t.match(String(response.headers.vary), /Want-Unencoded-Digest/)
        if (where === response.headers && coding === 'identity' && path !== '/file') t.equal(Number(response.headers['content-length']), body.length, 'Content-Length kept')
      }
    }
  })
}

t.test("responseDigests: ['unencoded-digest'] sends it unasked, with the route's most preferred algorithm", async (t) => {
  const app = await server({ responseDigests: ['unencoded-digest'], algorithms: ['sha-512', 'sha-256'] }, 'after')
  t.teardown(() => app.close())
  const port = await listen(app)
  const response = await request(`http://127.0.0.1:${port}/string`, { headers: { 'accept-encoding': 'br' } })
  const body = Buffer.from(await response.body.arrayBuffer())
  t.equal(response.headers['content-encoding'], 'br')
  t.equal(response.headers['unencoded-digest'], sha512(brotliDecompressSync(body)))
  t.notOk('vary' in response.headers && /Want-/.test(String(response.headers.vary)), 'nothing asked, no Vary for it')
  const route = Fastify()
  await route.register(fastifyDigestFields)
  route.get('/', { config: { digest: { responseDigests: ['unencoded-digest', 'repr-digest'] } } }, async () => 'route level')
  const routed = await route.inject('/')
  t.equal(routed.headers['unencoded-digest'], sha256('route level'))
  t.equal(routed.headers['repr-digest'], sha256('route level'))
})

t.test('HEAD, 204, 206, 304 and errors: Unencoded-Digest covers the representation or is not sent', async (t) => {
  const app = await server({ responseDigests: ['unencoded-digest'] }, 'after')
  app.get('/not-modified', async (_request, reply) => reply.code(304).send())
  app.get('/missing', async (_request, reply) => reply.code(404).send('no'))
  const head = await app.inject({ method: 'HEAD', url: '/string' })
  t.equal(head.headers['unencoded-digest'], sha256(text), 'HEAD: the representation a GET sends')
  t.equal(head.body, '')
  const empty = await app.inject('/empty')
  t.equal(empty.headers['unencoded-digest'], sha256(''), '204: the digest of empty content')
  const part = await app.inject('/supplied-part')
  t.equal(part.statusCode, 206)
  t.equal(part.headers['unencoded-digest'], sha256(text), '206: the whole representation, as the application supplied it')
  t.notOk('unencoded-digest' in (await app.inject('/not-modified')).headers, '304: nothing known')
  t.notOk('unencoded-digest' in (await app.inject('/missing')).headers, 'an error is not the representation')
  const asked = await app.inject({ url: '/missing', headers: { 'want-unencoded-digest': 'sha-256=1' } })
  t.notOk('unencoded-digest' in asked.headers)
})

t.test('a content coding the plugin cannot remove, or content that does not decode, gets no Unencoded-Digest', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields, { responseDigests: ['unencoded-digest', 'content-digest'] })
  app.get('/snappy', async (_request, reply) => reply.header('content-encoding', 'snappy').send(Buffer.from('not snappy')))
  app.get('/broken', async (_request, reply) => reply.header('content-encoding', 'gzip').send(Buffer.from('not gzip')))
  app.get('/broken-stream', async (_request, reply) => reply.header('content-encoding', 'gzip').send(Readable.from([Buffer.from('not gzip')])))
  for (const path of ['/snappy', '/broken']) {
    const response = await app.inject(path)
    t.equal(response.statusCode, 200)
    t.notOk('unencoded-digest' in response.headers, path)
    t.equal(response.headers['content-digest'], sha256(response.rawPayload), `${path}: Content-Digest is of the bytes sent`)
  }
  const port = await listen(app)
  t.teardown(() => app.close())
  const response = await request(`http://127.0.0.1:${port}/broken-stream`)
  t.equal(Buffer.from(await response.body.arrayBuffer()).toString(), 'not gzip', 'the content is sent as it is')
  t.notOk('unencoded-digest' in response.trailers)
  t.equal(response.trailers['content-digest'], sha256('not gzip'))
})

t.test('a file stream opened from a descriptor has no path to know the file by: it is hashed as it is sent', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields, { responseDigests: ['unencoded-digest'] })
  app.get('/fd', async (_request, reply) => reply.send(createReadStream('', { fd: openSync(filePath, 'r') })))
  t.teardown(() => app.close())
  const response = await request(`http://127.0.0.1:${await listen(app)}/fd`)
  t.equal(Buffer.from(await response.body.arrayBuffer()).toString(), fileContent)
  t.notOk('unencoded-digest' in response.headers)
  t.equal(response.trailers['unencoded-digest'], sha256(fileContent))
})

t.test('a Want-Unencoded-Digest nothing judged (a hook answered before the plugin) that does not parse asks for nothing', async (t) => {
  const app = Fastify()
  app.addHook('onRequest', async (_request, reply) => reply.type('text/plain').send('answered early'))
  await app.register(fastifyDigestFields)
  app.get('/', async () => 'never')
  const response = await app.inject({ url: '/', headers: { 'want-unencoded-digest': 'sha-256=(' } })
  t.equal(response.body, 'answered early')
  t.notOk('unencoded-digest' in response.headers)
})

t.test('content coded aes128gcm (RFC 8188) gets no Unencoded-Digest, asked for or not: a digest of the plaintext would leak it', async (t) => {
  // draft-ietf-httpbis-unencoded-digest-05: with aes128gcm, Unencoded-Digest SHOULD be omitted.
  const app = Fastify()
  await app.register(fastifyDigestFields, { responseDigests: ['unencoded-digest', 'content-digest'] })
  const ciphertext = seededBytes(4096, 23)
  app.get('/encrypted', async (_request, reply) => reply.header('content-encoding', 'aes128gcm').send(ciphertext))
  app.get('/encrypted-then-gzip', async (_request, reply) =>
    reply.header('content-encoding', 'aes128gcm, gzip').reprDigest({ 'sha-256': createHash('sha256').update('plaintext').digest() }).send(gzipSync(ciphertext)))
  app.get('/stream', async (_request, reply) => reply.header('content-encoding', 'aes128gcm').send(Readable.from([ciphertext])))
  t.teardown(() => app.close())
  const origin = `http://127.0.0.1:${await listen(app)}`
  for (const path of ['/encrypted', '/encrypted-then-gzip', '/stream']) {
    for (const want of [{}, { 'want-unencoded-digest': 'sha-256=10, sha-512=5' }]) {
      const response = await request(`${origin}${path}`, { headers: want })
      const body = Buffer.from(await response.body.arrayBuffer())
      t.equal(response.statusCode, 200)
      t.notOk('unencoded-digest' in response.headers || 'unencoded-digest' in response.trailers, `${path} ${JSON.stringify(want)}: none`)
      t.equal(response.headers['content-digest'] ?? response.trailers['content-digest'], sha256(body), `${path}: Content-Digest of the bytes sent`)
    }
  }
})
