// Found by the fourth attack on issue 29: a reply sent twice (an async handler or preHandler that
// called reply.send() and returned nothing, or two sends in a row) runs the onSend hooks twice at
// once while the plugin's hooks wait. The two sends shared what the route's hooks keep on the reply
// (the Unencoded-Digest found first, the fields placed, @fastify/compress's Content-Encoding): a
// stream went with the digest of no content in the header section, a second payload went
// uncompressed under `Content-Encoding: gzip`, two payloads were written into one body, or the
// connection was dropped. The first send to reach the route's response hooks is now the one sent,
// as Fastify has it for an async hook; a later one is dropped, its stream destroyed, and logged.
import { createHash } from 'node:crypto'
import { createReadStream, writeFileSync } from 'node:fs'
import { connect as h2connect } from 'node:http2'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { gunzipSync } from 'node:zlib'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyCompress from '@fastify/compress'
import { request } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import { listen, type Tap } from '../helpers.js'

const sha256 = (data: Buffer): string => `sha-256=:${createHash('sha256').update(data).digest('base64')}:`
const wantAll = { 'want-content-digest': 'sha-256=1', 'want-repr-digest': 'sha-256=1', 'want-unencoded-digest': 'sha-256=1' }
const long = (text: string): string => text.repeat(400)

interface Served { base: string, port: number, warnings: string[], closed: Promise<void> }

async function serve (t: Tap, http2 = false): Promise<Served> {
  const warnings: string[] = []
  const stream = { write (line: string): void { warnings.push(line) } }
  const app = Fastify({ http2, logger: { level: 'warn', stream } } as object) as unknown as FastifyInstance
  await app.register(fastifyDigestFields)
  await app.register(fastifyCompress, { threshold: 1, encodings: ['gzip'] })
  const file = join(t.testdir(), 'dropped.txt')
  writeFileSync(file, 'a file never sent')
  let fileClosed = (): void => {}
  const closed = new Promise<void>((resolve) => { fileClosed = resolve })
  app.get('/stream-without-return', async (_request, reply) => { reply.send(Readable.from(['s1', 's2'])) })
  app.get('/stream-then-string', (_request, reply) => {
    reply.send(Readable.from(['s1', 's2']))
    reply.send('second')
  })
  app.get('/string-twice', (_request, reply) => {
    reply.send(long('first '))
    reply.send('second')
  })
  app.get('/then-a-file', (_request, reply) => {
    reply.send('first')
    const dropped = createReadStream(file)
    dropped.once('close', fileClosed)
    reply.send(dropped)
  })
  app.get('/pre-handler-stream', {
    preHandler: async (_request, reply) => { reply.send(Readable.from(['p', 're'])) }
  }, async () => 'handler')
  app.get('/hooked-send-without-return', {
    config: { digest: { responseDigests: ['unencoded-digest'] } },
    onSend: async (_request, _reply, payload) => `${String(payload)}!`
  }, async (_request, reply) => { reply.header('content-encoding', 'identity').send('first') })
  app.get('/next', async () => 'next')
  t.teardown(() => app.close())
  const port = await listen(app)
  return { base: `http://127.0.0.1:${port}`, port, warnings, closed }
}

interface Received { status: number, headers: Record<string, unknown>, trailers: Record<string, unknown>, body: Buffer }

/** Checks every digest field of a response, in either section, against node:crypto and zlib. */
function checkDigests (t: Tap, { headers, trailers, body }: Received): Buffer {
  const decoded = headers['content-encoding'] === 'gzip' ? gunzipSync(body) : body
  for (const section of [headers, trailers]) {
    for (const name of ['content-digest', 'repr-digest']) {
      if (section[name] !== undefined) t.equal(section[name], sha256(body), `${name}: of the bytes sent`)
    }
    if (section['unencoded-digest'] !== undefined) t.equal(section['unencoded-digest'], sha256(decoded), 'unencoded-digest: of the bytes decoded')
  }
  return decoded
}

async function get (base: string, path: string): Promise<Received> {
  const response = await request(base + path, { headers: { ...wantAll, 'accept-encoding': 'gzip' } })
  const body = Buffer.from(await response.body.arrayBuffer())
  return { status: response.statusCode, headers: response.headers, trailers: response.trailers, body }
}

const cases = [
  ['an async handler that sends a stream and returns nothing', '/stream-without-return', 's1s2'],
  ['a stream sent, then a string', '/stream-then-string', 's1s2'],
  ['a string sent twice, compressed', '/string-twice', long('first ')],
  ['an async preHandler that sends a stream and returns nothing, then the handler', '/pre-handler-stream', 'pre'],
  ['a route hook, and a send without return', '/hooked-send-without-return', 'first!']
] as const

for (const [name, path, sent] of cases) {
  t.test(`${name}: the first send goes, with the digests of its bytes; the later one is logged`, async (t) => {
    const { base, warnings } = await serve(t)
    const response = await get(base, path)
    t.equal(response.status, 200)
    t.equal(checkDigests(t, response).toString(), sent)
    t.ok(warnings.some((line) => line.includes('sent its reply twice')), 'the dropped send is logged')
    t.equal(checkDigests(t, await get(base, '/next')).toString(), 'next', 'the server still answers')
  })

  // Apart, since a stream's go in the trailer section, which Fastify 6.0.0-alpha.4 loses (.ci/fastify-6.json).
  t.test(`${name}: a Content-Digest and an Unencoded-Digest are sent`, async (t) => {
    const { base } = await serve(t)
    const response = await get(base, path)
    t.ok(response.headers['content-digest'] ?? response.trailers['content-digest'], 'a Content-Digest')
    t.ok(response.headers['unencoded-digest'] ?? response.trailers['unencoded-digest'], 'an Unencoded-Digest')
  })
}

t.test('a stream sent second is destroyed, so that a file it reads is closed', async (t) => {
  const { base, closed } = await serve(t)
  const response = await get(base, '/then-a-file')
  t.equal(checkDigests(t, response).toString(), 'first')
  await closed
})

t.test('over HTTP/2: the first send goes with its digests, and the stream ends cleanly', async (t) => {
  const { port } = await serve(t, true)
  const session = h2connect(`http://127.0.0.1:${port}`)
  t.teardown(() => session.close())
  for (const [, path, sent] of cases) {
    const stream = session.request({ ':path': path, ...wantAll, 'accept-encoding': 'gzip' })
    const chunks: Buffer[] = []
    stream.on('data', (chunk: Buffer) => chunks.push(chunk))
    const headers = await new Promise<Record<string, unknown>>((resolve) => stream.once('response', resolve))
    const trailers = new Promise<Record<string, unknown>>((resolve) => {
      stream.once('trailers', resolve)
      stream.once('end', () => { resolve({}) })
    })
    const code = await new Promise<number>((resolve) => stream.once('close', () => { resolve(stream.rstCode) }))
    const response = { status: Number(headers[':status']), headers, trailers: await trailers, body: Buffer.concat(chunks) }
    t.equal(code, 0, `${path}: no RST_STREAM`)
    t.equal(checkDigests(t, response).toString(), sent, path)
  }
})

// Found by the attack on the rule above: an error's answer that failed in turn (a missing error
// page, a route hook that throws on it) was followed by Fastify's next error answer, which the
// rule took for a later send and dropped, so the request was never answered. An answer of 400 or
// above is never dropped, and the route's error handler lets any other through.
async function answersOfErrors (t: Tap, plugin: boolean): Promise<string> {
  const app = Fastify()
  if (plugin) await app.register(fastifyDigestFields)
  const missing = join(t.testdir(), 'missing.html')
  await app.register(async (scope) => {
    scope.setErrorHandler((_error, _request, reply) => { reply.code(500).type('text/html').send(createReadStream(missing)) })
    scope.get('/missing-file', (_request, reply) => { reply.send(createReadStream(missing)) })
    scope.get('/throws', async () => { throw new Error('the handler failed') })
  })
  await app.register(async (scope) => {
    scope.setErrorHandler((_error, _request, reply) => { reply.code(502).send('error page') })
    scope.get('/hook-throws-on-the-answer', {
      onSend: async (_request, _reply, payload) => {
        if (payload === 'error page') throw new Error('the hook failed')
        return payload
      }
    }, async () => { throw new Error('the handler failed') })
    // The error handler answers 200: the rule must not drop it as a later send of the first.
    scope.get('/answered-200', { onSend: async (_request, reply, payload) => { if (reply.statusCode === 200 && payload === 'first') throw new Error('x'); return payload } },
      async (_request, reply) => { reply.code(200).send('first') })
  })
  await app.register(async (scope) => {
    scope.setErrorHandler((_error, _request, reply) => { reply.code(200).send('answered anyway') })
    scope.get('/error-answered-200', { onSend: async (_request, _reply, payload) => { if (payload === 'first') throw new Error('x'); return payload } },
      async () => 'first')
  })
  app.post('/mismatch', { onSend: async (_request, reply, payload) => { if (reply.statusCode === 400) throw new Error('the hook failed'); return payload } },
    async () => 'verified')
  t.teardown(() => app.close())
  return `http://127.0.0.1:${await listen(app)}`
}

t.test('an error whose answer fails in turn is answered as Fastify alone answers it', async (t) => {
  const [bare, base] = [await answersOfErrors(t, false), await answersOfErrors(t, true)]
  const mismatched = { method: 'POST', body: 'content', headers: { 'content-type': 'text/plain', 'content-digest': sha256(Buffer.from('other')) } } as const
  for (const [path, options] of [
    ['/missing-file', {}], ['/throws', {}], ['/hook-throws-on-the-answer', {}], ['/answered-200', {}], ['/error-answered-200', {}],
    ['/mismatch', mismatched]
  ] as const) {
    const expected = await request(bare + path, { ...options, headersTimeout: 5000 })
    const response = await request(base + path, { ...options, headersTimeout: 5000, headers: { ...('headers' in options ? options.headers : {}), ...wantAll } })
    const body = await response.body.text()
    await expected.body.dump()
    // Fastify alone does not verify: with the plugin the mismatch's 400 stands, its problem failed in the hook.
    t.equal(response.statusCode, path === '/mismatch' ? 400 : expected.statusCode, `${path}: answered (${body.slice(0, 60)})`)
  }
})

// Found by the attack on the fix above: an error handler's answer that failed in turn (a stream
// that failed before its first byte, a route hook that failed it, in any of a hook's three ways)
// passes the error to the parent scope's handler, whose answer below 400 the rule dropped as a
// later send. A send is over once its handed-on stream or a route hook between failed it.
async function nestedErrorHandlers (t: Tap, plugin: boolean): Promise<string> {
  const app = Fastify()
  if (plugin) await app.register(fastifyDigestFields)
  const failing = (): Readable => new Readable({ read () { setImmediate(() => { this.destroy(new Error('the error page failed')) }) } })
  const isPage = (payload: unknown): boolean => payload === 'child page'
  await app.register(async (parent) => {
    parent.setErrorHandler((_error, _request, reply) => { reply.code(302).header('location', '/elsewhere').send('parent') })
    await parent.register(async (child) => {
      child.setErrorHandler((_error, request, reply) => { reply.code(200).send(request.url === '/stream' ? failing() : 'child page') })
      child.get('/stream', async () => { throw new Error('the handler failed') })
      child.get('/callback', {
        onSend: (_request, _reply, payload, done) => { if (isPage(payload)) done(new Error('x')); else done(null, payload) }
      }, async () => { throw new Error('the handler failed') })
      child.get('/sync-throw', {
        onSend: (_request, _reply, payload, done) => {
          if (isPage(payload)) throw new Error('x')
          done(null, payload)
        }
      }, async () => { throw new Error('the handler failed') })
      child.get('/async-reject', {
        onSend: async (_request, _reply, payload) => {
          if (isPage(payload)) throw new Error('x')
          return payload
        }
      }, async () => { throw new Error('the handler failed') })
    })
  })
  t.teardown(() => app.close())
  return `http://127.0.0.1:${await listen(app)}`
}

t.test('an error page that fails in turn hands the error to the parent scope, whose answer below 400 goes', async (t) => {
  const [bare, base] = [await nestedErrorHandlers(t, false), await nestedErrorHandlers(t, true)]
  for (const path of ['/stream', '/callback', '/sync-throw', '/async-reject']) {
    const expected = await request(bare + path, { headersTimeout: 5000 })
    await expected.body.dump()
    t.equal(expected.statusCode, 302, `${path}: Fastify alone`)
    const response = await request(base + path, { headersTimeout: 5000, headers: wantAll })
    t.equal(response.statusCode, 302, path)
    t.equal(await response.body.text(), 'parent', path)
  }
})
