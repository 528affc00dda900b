// Found by the attack after issue 29's fix of replies sent twice: Unencoded-Digest is found by the
// route's first onSend hook, before @fastify/compress adds a coding, and a hook declared on the
// route runs after it. One that changed the content without coding it (text appended, a stream
// returned in place of the payload) left the field, signed too, describing bytes never sent. The
// last hook now finds it again over what reaches it; after a coding the plugin cannot remove
// (aes128gcm, whose digest would disclose the plaintext) it sends none. A third attack found the
// same of route hooks that code the content themselves, label it coded, take a coding off, or make
// the response a 204: each is found again over what reaches the last hook. A fourth found a hook
// that changes a Buffer in place (the same object handed on), and a Repr-Digest the application
// supplied sent after a hook changed the content: both are now found again over what is sent.
// A fifth found a route hook that makes a streamed response a 304: the digest found over the stream
// went to the trailer section, which a 304 cannot take, and Node's throw ended the process. A 304 or
// 206 made by a route hook now sends none.
import { createHash, generateKeyPairSync, verify } from 'node:crypto'
import { once } from 'node:events'
import { connect } from 'node:net'
import { Readable } from 'node:stream'
import { gunzipSync, gzipSync } from 'node:zlib'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { request } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import { h2Request, listen, watchProcess, type Tap } from '../helpers.js'

const { publicKey, privateKey } = generateKeyPairSync('ed25519')
const sha256 = (data: Buffer): string => `sha-256=:${createHash('sha256').update(data).digest('base64')}:`

async function origin (t: Tap): Promise<string> {
  const app = Fastify()
  await app.register(fastifyDigestFields, { responseDigests: ['unencoded-digest'] })
  app.get('/appended', { onSend: async (_request, _reply, payload) => `${String(payload)} and more` }, async () => 'the handler\'s')
  app.get('/replaced', { onSend: async () => Readable.from(['a stream in its place']) }, async () => 'the handler\'s')
  app.get('/changed-in-place', { onSend: async (_request, _reply, payload) => { (payload as Buffer)[0] = 0x58; return payload } },
    async () => Buffer.from('the handler\'s'))
  app.get('/supplied-then-appended', { onSend: async (_request, _reply, payload) => `${String(payload)}!` },
    async (_request, reply) => reply.reprDigest({ 'sha-256': createHash('sha256').update('the handler\'s').digest() }).send('the handler\'s'))
  app.get('/unchanged', { onSend: async (_request, reply, payload) => { reply.header('x-seen', '1'); return payload } }, async () => 'the handler\'s')
  app.get('/signed', {
    config: { digest: { integritySignatures: { privateKey } } },
    onSend: async (_request, _reply, payload) => `${String(payload)}!`
  }, async () => 'the handler\'s')
  app.get('/changed-and-gzipped', {
    onSend: [async (_request, _reply, payload) => `${String(payload)}, changed`, async (_request, reply, payload) => {
      reply.header('content-encoding', 'gzip')
      return gzipSync(String(payload))
    }]
  }, async () => 'the handler\'s')
  app.get('/labelled-gzip', { onSend: async (_request, reply, payload) => { reply.header('content-encoding', 'gzip'); return payload } }, async () => 'not gzip')
  app.get('/coding-taken-off', { onSend: async (_request, reply, payload) => { reply.removeHeader('content-encoding'); return payload } },
    async (_request, reply) => reply.header('content-encoding', 'gzip').send(gzipSync('the handler\'s')))
  app.get('/made-204', { onSend: async (_request, reply, payload) => { reply.code(204); return payload } }, async () => 'dropped')
  app.get('/gzipped-204', async (_request, reply) => reply.code(204).header('content-encoding', 'gzip').send(gzipSync('dropped')))
  app.get('/gzipped-made-204', { onSend: async (_request, reply, payload) => { reply.code(204); return payload } },
    async (_request, reply) => reply.header('content-encoding', 'gzip').send(gzipSync('dropped')))
  app.get('/encrypted', {
    onSend: async (_request, reply, payload) => {
      reply.header('content-encoding', 'aes128gcm')
      return Buffer.from(String(payload)).reverse()
    }
  }, async () => 'the handler\'s')
  t.teardown(() => app.close())
  return `http://127.0.0.1:${await listen(app)}`
}

t.test('a route hook that changes the content: Unencoded-Digest of the bytes received (node:crypto)', async (t) => {
  const base = await origin(t)
  for (const path of ['/appended', '/changed-in-place', '/supplied-then-appended', '/unchanged', '/signed']) {
    const response = await request(base + path, { headers: { 'want-repr-digest': 'sha-256=1' } })
    const body = Buffer.from(await response.body.arrayBuffer())
    t.equal(response.headers['unencoded-digest'], sha256(body), `${path}: ${body.toString()}`)
    t.equal(response.headers['repr-digest'], sha256(body), `${path}: Repr-Digest`)
  }
})

t.test('a route hook that returns a stream in place of the payload: Unencoded-Digest of its bytes in the trailer section', async (t) => {
  const response = await request(await origin(t) + '/replaced')
  const body = Buffer.from(await response.body.arrayBuffer())
  t.equal(body.toString(), 'a stream in its place')
  t.equal(response.trailers['unencoded-digest'], sha256(body))
})

t.test('a signature over the Unencoded-Digest sent verifies with the public key', async (t) => {
  const response = await request(await origin(t) + '/signed')
  const body = Buffer.from(await response.body.arrayBuffer())
  t.equal(body.toString(), 'the handler\'s!')
  const field = response.headers['unencoded-digest'] as string
  t.equal(field, sha256(body))
  const parameters = String(response.headers['signature-input']).replace(/^sig=/, '')
  const base = `"unencoded-digest";sf: ${field}\n"@signature-params": ${parameters}`
  const signature = Buffer.from(String(response.headers.signature).replace(/^sig=:(.*):$/, '$1'), 'base64')
  t.ok(verify(null, Buffer.from(base), publicKey, signature), 'RFC 9421 signature base, built here')
})

t.test('a route hook that adds a coding the plugin cannot remove: no Unencoded-Digest', async (t) => {
  const response = await request(await origin(t) + '/encrypted')
  await response.body.arrayBuffer()
  t.equal(response.headers['content-encoding'], 'aes128gcm')
  t.notOk('unencoded-digest' in response.headers, 'a digest of the plaintext would disclose it')
})

t.test('a route hook that codes, labels, takes a coding off or drops the content: found again over what is sent', async (t) => {
  const base = await origin(t)
  const changed = await request(base + '/changed-and-gzipped')
  const coded = Buffer.from(await changed.body.arrayBuffer())
  t.equal(changed.headers['content-encoding'], 'gzip')
  t.equal(gunzipSync(coded).toString(), 'the handler\'s, changed')
  t.equal(changed.headers['unencoded-digest'], sha256(gunzipSync(coded)), 'of the content decoded here')
  const labelled = await request(base + '/labelled-gzip')
  await labelled.body.arrayBuffer()
  t.notOk('unencoded-digest' in labelled.headers, 'content that does not decode gets none')
  const takenOff = await request(base + '/coding-taken-off')
  const sent = Buffer.from(await takenOff.body.arrayBuffer())
  t.notOk('content-encoding' in takenOff.headers)
  t.equal(takenOff.headers['unencoded-digest'], sha256(sent), 'of the bytes as sent, uncoded')
  const made204 = await request(base + '/made-204')
  t.equal(made204.statusCode, 204)
  await made204.body.arrayBuffer()
  t.equal(made204.headers['unencoded-digest'], sha256(Buffer.alloc(0)), 'of empty content')
  // Empty content has nothing to decode, whatever Content-Encoding says (found by the seventh pass's second attack).
  const gzipped204 = await request(base + '/gzipped-made-204')
  t.equal(gzipped204.statusCode, 204)
  await gzipped204.body.arrayBuffer()
  t.equal(gzipped204.headers['unencoded-digest'], sha256(Buffer.alloc(0)), 'coded, of empty content too')
  const handler204 = await request(base + '/gzipped-204')
  await handler204.body.arrayBuffer()
  t.equal(handler204.headers['unencoded-digest'], sha256(Buffer.alloc(0)), 'a 204 the handler coded, of empty content')
})

t.test('a route hook that makes a streamed response a 304 or a 206: no Unencoded-Digest, no trailer section, the connection kept', async (t) => {
  const escaped = watchProcess(t)
  const stream = (): Readable => Readable.from([Buffer.from('hello '), Buffer.from('world')])
  const settings = { 'asked for': {}, unasked: { responseDigests: ['unencoded-digest'] }, signed: { integritySignatures: { privateKey } } }
  for (const http2 of [false, true]) {
    for (const [name, options] of Object.entries(settings)) {
      const app = Fastify({ http2 } as object) as unknown as FastifyInstance
      await app.register(fastifyDigestFields, options as object)
      app.get('/made-304', { onSend: async (_request, reply, payload) => { reply.code(304); return payload } },
        async (_request, reply) => reply.send(stream()))
      app.get('/made-206', { onSend: async (_request, reply, payload) => { reply.code(206).header('content-range', 'bytes 0-10/11'); return payload } },
        async (_request, reply) => reply.send(stream()))
      app.get('/next', async () => 'next')
      const port = await listen(app)
      t.teardown(() => app.close())
      const label = `${http2 ? 'HTTP/2' : 'HTTP/1.1'}, ${name}`
      if (http2) {
        for (const [path, status] of [['/made-304', 304], ['/made-206', 206]] as const) {
          const response = await h2Request(port, { ':path': path, 'want-unencoded-digest': 'sha-256=5' })
          t.equal(response.status, status, `${label}: ${path}`)
          t.notOk('unencoded-digest' in response.headers, `${label}: ${path} sends none`)
        }
        continue
      }
      // Three requests on one connection: the two answers, then the next request's.
      const socket = connect({ host: '127.0.0.1', port })
      const received: Buffer[] = []
      socket.on('data', (data: Buffer) => received.push(data))
      const head = (path: string, last = false): string => `GET ${path} HTTP/1.1\r\nHost: x\r\nWant-Unencoded-Digest: sha-256=5\r\n${last ? 'Connection: close\r\n' : ''}\r\n`
      socket.write(head('/made-304') + head('/made-206') + head('/next', true))
      await once(socket, 'close')
      const answers = Buffer.concat(received).toString('latin1').split(/(?=HTTP\/1\.1 )/)
      t.same(answers.map((answer) => answer.slice(9, 12)), ['304', '206', '200'], `${label}: every request answered`)
      t.notMatch(answers.slice(0, 2).join(''), /^(unencoded-digest|trailer|signature):/im, `${label}: no Unencoded-Digest, no trailer section`)
      t.match(answers[1], /\r\n\r\n6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n$/, `${label}: the 206 ends with its content and no trailer field`)
      t.match(answers[2], /\r\n\r\nnext$/)
    }
  }
  t.same(escaped, [], 'nothing escaped to the process')
})
