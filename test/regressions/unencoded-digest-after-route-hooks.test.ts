// Found by the attack after issue 29's fix of replies sent twice: Unencoded-Digest is found by the
// route's first onSend hook, before @fastify/compress adds a coding, and a hook declared on the
// route runs after it. One that changed the content without coding it (text appended, a stream
// returned in place of the payload) left the field, signed too, describing bytes never sent. The
// last hook now finds it again over what reaches it; after a coding the plugin cannot remove
// (aes128gcm, whose digest would disclose the plaintext) it sends none.
import { createHash, generateKeyPairSync, verify } from 'node:crypto'
import { Readable } from 'node:stream'
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
  app.get('/unchanged', { onSend: async (_request, reply, payload) => { reply.header('x-seen', '1'); return payload } }, async () => 'the handler\'s')
  app.get('/signed', {
    config: { digest: { integritySignatures: { privateKey } } },
    onSend: async (_request, _reply, payload) => `${String(payload)}!`
  }, async () => 'the handler\'s')
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
  for (const [path, section] of [['/appended', 'headers'], ['/replaced', 'trailers'], ['/unchanged', 'headers'], ['/signed', 'headers']] as const) {
    const response = await request(base + path)
    const body = Buffer.from(await response.body.arrayBuffer())
    t.equal(response[section]['unencoded-digest'], sha256(body), `${path}: ${body.toString()}`)
  }
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
