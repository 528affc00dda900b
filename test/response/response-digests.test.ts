import { createHash } from 'node:crypto'
import { connect } from 'node:http2'
import { Readable } from 'node:stream'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyCompress from '@fastify/compress'
import { request } from 'undici'
import fastifyDigestFields, { type FastifyDigestFieldsOptions } from '../../lib/index.js'
import { hello, helloSha256, helloSha512, listen } from '../helpers.js'

// Digests on responses (RFC 9530 sections 2 to 4, response-digests.md), checked against RFC 9530's
// example values of {"hello": "world"} or an independent hash of the exact bytes the client got.

const sha = (algorithm: 'sha256' | 'sha512', data: string | Buffer): string => createHash(algorithm).update(data).digest('base64')
const member = (key: 'sha-256' | 'sha-512', data: string | Buffer): string => `${key}=:${sha(key === 'sha-256' ? 'sha256' : 'sha512', data)}:`

async function server (options: FastifyDigestFieldsOptions = {}, setup: (app: FastifyInstance) => void = () => {}): Promise<FastifyInstance> {
  const app = Fastify()
  await app.register(fastifyDigestFields, options)
  app.get('/hello', async (_request, reply) => reply.type('application/json').send(hello))
  app.get('/buffer', async (_request, reply) => reply.type('application/octet-stream').send(Buffer.from('buffer content')))
  app.get('/object', async () => ({ hello: 'world', list: [1, 2, 3] }))
  app.get('/stream', async (_request, reply) => reply.type('text/plain').send(Readable.from(['streamed ', 'content ', 'in pieces'])))
  setup(app)
  return app
}

t.test("RFC 9530's example: Want-Repr-Digest and Want-Content-Digest on {\"hello\": \"world\"}", async (t) => {
  const app = await server()
  const response = await app.inject({ method: 'GET', url: '/hello', headers: { 'want-repr-digest': 'sha-256=1', 'want-content-digest': 'sha-512=3, sha-256=1' } })
  t.equal(response.statusCode, 200)
  t.equal(response.headers['repr-digest'], helloSha256)
  t.equal(response.headers['content-digest'], helloSha512)
  t.equal(response.headers.vary, 'Want-Content-Digest, Want-Repr-Digest')
  const plain = await app.inject({ method: 'GET', url: '/hello' })
  t.notOk('repr-digest' in plain.headers || 'content-digest' in plain.headers || 'vary' in plain.headers, 'nothing asked, nothing sent')
})

t.test('every payload type over a real socket: the digest of the bytes received, in the header or the trailer section', async (t) => {
  const app = await server()
  const port = await listen(app)
  t.teardown(() => app.close())
  for (const path of ['/hello', '/buffer', '/object', '/stream']) {
    const response = await request(`http://127.0.0.1:${port}${path}`, { headers: { 'want-content-digest': 'sha-256=5', 'want-repr-digest': 'sha-512=5' } })
    const body = Buffer.from(await response.body.arrayBuffer())
    const fields = path === '/stream' ? response.trailers : response.headers
    t.equal(fields['content-digest'], member('sha-256', body), `${path}: Content-Digest`)
    t.equal(fields['repr-digest'], member('sha-512', body), `${path}: Repr-Digest`)
    if (path === '/stream') t.equal(response.headers.trailer, 'content-digest repr-digest', 'announced in Trailer')
  }
})

t.test('a streamed response over HTTP/2 carries its digests in trailers', async (t) => {
  const app = Fastify({ http2: true })
  await app.register(fastifyDigestFields)
  app.get('/stream', async (_request, reply) => reply.send(Readable.from(['streamed ', 'over ', 'HTTP/2'])))
  const port = await listen(app)
  t.teardown(() => app.close())
  const session = connect(`http://127.0.0.1:${port}`)
  t.teardown(() => session.close())
  const stream = session.request({ ':path': '/stream', 'want-repr-digest': 'sha-256=9' })
  const received: Buffer[] = []
  stream.on('data', (chunk: Buffer) => received.push(chunk))
  const [trailers] = await Promise.all([
    new Promise<Record<string, string>>((resolve) => stream.once('trailers', (h) => resolve(h as Record<string, string>))),
    new Promise((resolve) => stream.once('end', resolve))
  ])
  t.equal(trailers['repr-digest'], member('sha-256', Buffer.concat(received)))
})

t.test('weights choose the algorithm; ties go to the route; 0 asks for nothing', async (t) => {
  const app = await server({ algorithms: ['sha-512', 'sha-256'] })
  const repr = async (want: string): Promise<string | undefined> =>
    (await app.inject({ method: 'GET', url: '/hello', headers: { 'want-repr-digest': want } })).headers['repr-digest'] as string | undefined
  t.equal(await repr('sha-256=3, sha-512=7'), helloSha512)
  t.equal(await repr('sha-256=7, sha-512=3'), helloSha256)
  t.equal(await repr('sha-256=5, sha-512=5'), helloSha512, 'a tie goes to the route\'s first algorithm')
  t.equal(await repr('sha-256=0, sha-512=0'), undefined)
  t.equal(await repr('md5=9, sha-256=1'), helloSha256, 'an unsupported key beside a supported one is ignored by default')
  const unsupported = await app.inject({ method: 'GET', url: '/hello', headers: { 'want-repr-digest': 'md5=9' } })
  t.equal(unsupported.statusCode, 400, 'a field naming nothing supported is the unsupported-algorithm problem')
  t.notOk('vary' in unsupported.headers, 'a problem does not vary on the field')
})

t.test('unsolicited digests: on every successful response, with the most preferred algorithm', async (t) => {
  const app = await server({ algorithms: ['sha-512', 'sha-256'], responseDigests: ['repr-digest', 'content-digest'] }, (app) => {
    app.get('/missing', async (_request, reply) => reply.code(404).send({ missing: true }))
    app.get('/none', { config: { digest: { responseDigests: [] } } }, async () => hello)
    app.get('/stored', async (_request, reply) => reply.reprDigest({ 'sha-256': Buffer.alloc(32, 7) }).send(hello))
    app.get('/part', async (_request, reply) => reply.code(206).header('content-range', 'bytes 0-1/18').send(hello.slice(0, 2)))
  })
  const ok = await app.inject({ method: 'GET', url: '/hello' })
  t.equal(ok.headers['repr-digest'], helloSha512)
  t.equal(ok.headers['content-digest'], helloSha512)
  t.notOk('vary' in ok.headers)
  const asked = await app.inject({ method: 'GET', url: '/hello', headers: { 'want-content-digest': 'sha-256=2' } })
  t.equal(asked.headers['content-digest'], helloSha256, 'a preference wins over the route default')
  t.notOk('repr-digest' in (await app.inject({ method: 'GET', url: '/missing' })).headers)
  t.notOk('repr-digest' in (await app.inject({ method: 'GET', url: '/none' })).headers)
  t.equal((await app.inject({ method: 'GET', url: '/stored' })).headers['repr-digest'], `sha-256=:${Buffer.alloc(32, 7).toString('base64')}:`, 'a supplied digest goes unsolicited too')
  const part = await app.inject({ method: 'GET', url: '/part' })
  t.notOk('repr-digest' in part.headers, 'a part is not the representation')
  t.equal(part.headers['content-digest'], member('sha-512', hello.slice(0, 2)))
  await t.rejects(async () => { await Fastify().register(fastifyDigestFields, { responseDigests: ['digest'] as never }) }, /responseDigests must be a list of content-digest, repr-digest, unencoded-digest, got \["digest"\]/)
})

t.test('a digest the application supplies is sent instead of hashing the representation', async (t) => {
  const stored = createHash('sha256').update('the stored representation').digest()
  const app = await server({}, (app) => {
    app.get('/stored', async (_request, reply) => reply.reprDigest({ 'sha-256': stored }).send('the stored representation'))
    app.get('/bad', async (_request, reply) => reply.reprDigest({ 'sha-256': Buffer.alloc(3) }).send('x'))
  })
  const repr = async (want: string) => (await app.inject({ method: 'GET', url: '/stored', headers: { 'want-repr-digest': want } })).headers['repr-digest']
  t.equal(await repr('sha-256=1'), `sha-256=:${stored.toString('base64')}:`)
  t.equal(await repr('sha-512=10, sha-256=1'), `sha-256=:${stored.toString('base64')}:`, 'a supplied value wins while the client accepts its algorithm')
  t.equal(await repr('sha-512=10, sha-256=0'), member('sha-512', 'the stored representation'), 'otherwise the representation is hashed')
  const bad = await app.inject({ method: 'GET', url: '/bad' })
  t.equal(bad.statusCode, 500)
  t.match(bad.json().message, /reply\.reprDigest: sha-256 must be a Buffer of the digest's length/)
})

t.test('206, HEAD, 304 and 204 as RFC 9530 says', async (t) => {
  const whole = 'the whole representation'
  const app = await server({}, (app) => {
    app.get('/partial', async (request, reply) => {
      if (request.headers['x-supply'] === 'yes') reply.reprDigest({ 'sha-256': createHash('sha256').update(whole).digest() })
      return reply.code(206).header('content-range', `bytes 4-8/${whole.length}`).send(whole.slice(4, 9))
    })
    app.get('/unchanged', async (request, reply) => {
      if (request.headers['x-supply'] === 'yes') reply.reprDigest({ 'sha-256': createHash('sha256').update(whole).digest() })
      return reply.code(304).send()
    })
    app.delete('/gone', async (_request, reply) => reply.code(204).send())
    app.get('/nothing', async (_request, reply) => reply.send())
  })
  const want = { 'want-repr-digest': 'sha-256=1', 'want-content-digest': 'sha-256=1' }
  const partial = await app.inject({ method: 'GET', url: '/partial', headers: want })
  t.equal(partial.headers['content-digest'], member('sha-256', 'whole'), 'a 206 Content-Digest covers the part sent')
  t.notOk('repr-digest' in partial.headers, 'the part is not the representation')
  const supplied = await app.inject({ method: 'GET', url: '/partial', headers: { ...want, 'x-supply': 'yes' } })
  t.equal(supplied.headers['repr-digest'], member('sha-256', whole))
  const head = await app.inject({ method: 'HEAD', url: '/hello', headers: want })
  t.equal(head.headers['repr-digest'], helloSha256, 'HEAD: the representation a GET would send')
  t.notOk('content-digest' in head.headers, 'HEAD sends no content')
  const headStream = await app.inject({ method: 'HEAD', url: '/stream', headers: want })
  t.notOk('repr-digest' in headStream.headers, 'HEAD of a stream that nobody reads: only a supplied digest could be sent')
  t.notOk('repr-digest' in (await app.inject({ method: 'GET', url: '/unchanged', headers: want })).headers)
  t.equal((await app.inject({ method: 'GET', url: '/unchanged', headers: { ...want, 'x-supply': 'yes' } })).headers['repr-digest'], member('sha-256', whole))
  const gone = await app.inject({ method: 'DELETE', url: '/gone', headers: want })
  t.equal(gone.headers['content-digest'], member('sha-256', ''), 'a 204 has no content: the digest of empty content')
  const nothing = await app.inject({ method: 'GET', url: '/nothing', headers: want })
  t.equal(nothing.headers['content-digest'], member('sha-256', ''), 'a 200 without a payload: the digest of empty content')
})

for (const compressFirst of [true, false]) {
  t.test(`with @fastify/compress registered ${compressFirst ? 'before' : 'after'} the plugin, gzip responses are hashed as gzip bytes`, async (t) => {
    const app = Fastify()
    if (compressFirst) await app.register(fastifyCompress, { threshold: 16 })
    await app.register(fastifyDigestFields)
    if (!compressFirst) await app.register(fastifyCompress, { threshold: 16 })
    const text = 'compressible '.repeat(200)
    app.get('/text', async (_request, reply) => reply.type('text/plain').send(text))
    app.get('/stream', async (_request, reply) => reply.type('text/plain').send(Readable.from([text, text])))
    const port = await listen(app)
    t.teardown(() => app.close())
    for (const path of ['/text', '/stream']) {
      const response = await request(`http://127.0.0.1:${port}${path}`, { headers: { 'accept-encoding': 'gzip', 'want-content-digest': 'sha-256=1', 'want-repr-digest': 'sha-512=1' } })
      t.equal(response.headers['content-encoding'], 'gzip', path)
      const gzipped = Buffer.from(await response.body.arrayBuffer())
      const fields = path === '/stream' ? response.trailers : response.headers
      t.equal(fields['content-digest'], member('sha-256', gzipped), `${path}: Content-Digest of the gzip bytes`)
      t.equal(fields['repr-digest'], member('sha-512', gzipped), `${path}: Repr-Digest of the gzip-coded representation`)
    }
  })
}
