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
import { createHash, generateKeyPairSync, verify } from 'node:crypto'
import { Readable } from 'node:stream'
import { gunzipSync, gzipSync } from 'node:zlib'
import t from 'tap'
import Fastify from 'fastify'
import { request } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import { listen, type Tap } from '../helpers.js'

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
})
