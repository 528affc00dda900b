import { createHash, generateKeyPairSync, verify, type KeyObject } from 'node:crypto'
import { Readable } from 'node:stream'
import { gunzipSync } from 'node:zlib'
import t from 'tap'
import Fastify from 'fastify'
import fastifyCompress from '@fastify/compress'
import { createVerifier, httpbis } from 'http-message-signatures'
import { request } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import { listen } from '../helpers.js'

// Signature-based SRI (response-digests.md): an RFC 9421 signature over Unencoded-Digest with
// tag="ed25519-integrity", checked by http-message-signatures and by a signature base built here
// from the specification's shapes and verified with the public key.

const { publicKey, privateKey } = generateKeyPairSync('ed25519')
const other = generateKeyPairSync('ed25519')
const rawKey = (key: KeyObject): string => Buffer.from(key.export({ format: 'jwk' }).x as string, 'base64url').toString('base64')
const keyid = rawKey(publicKey)
const script = 'document.title = "signed"\n'.repeat(50)
const sha256 = (data: string | Buffer): string => `sha-256=:${createHash('sha256').update(data).digest('base64')}:`

async function app (options: object = {}): Promise<string> {
  const server = Fastify()
  await server.register(fastifyDigestFields, { integritySignatures: { privateKey }, ...options })
  await server.register(fastifyCompress, { threshold: 0 })
  server.get('/app.js', async (_request, reply) => reply.type('text/javascript').send(script))
  server.get('/stream.js', async (_request, reply) => reply.type('text/javascript').send(Readable.from([script])))
  server.get('/unsigned.js', { config: { digest: { integritySignatures: false } } }, async (_request, reply) => reply.type('text/javascript').send(script))
  server.get('/missing.js', async (_request, reply) => reply.code(404).send('no'))
  t.teardown(() => server.close())
  return `http://127.0.0.1:${await listen(server)}`
}

/** The signature base of the specification, verified with `key`. */
function verifiesByHand (headers: Record<string, unknown>, key: KeyObject): boolean {
  const input = String(headers['signature-input'])
  const parameters = input.replace(/^sig=/, '')
  const base = `"unencoded-digest";sf: ${String(headers['unencoded-digest'])}\n"@signature-params": ${parameters}`
  const signature = Buffer.from(String(headers.signature).replace(/^sig=:(.*):$/, '$1'), 'base64')
  return verify(null, Buffer.from(base), key, signature)
}

async function verifiesWithLibrary (status: number, headers: Record<string, unknown>, key: KeyObject): Promise<boolean | null> {
  const flat = Object.fromEntries(Object.entries(headers).map(([name, value]) => [name, String(value)]))
  return await httpbis.verifyMessage({
    keyLookup: async (parameters) => parameters.keyid === rawKey(key) ? { id: keyid, algs: ['ed25519'], verify: createVerifier(key, 'ed25519') } : null,
    requiredFields: ['unencoded-digest']
  }, { status, headers: flat })
}

t.test('a signed response: Unencoded-Digest in the header section and a signature Chromium and RFC 9421 accept', async (t) => {
  const base = await app()
  for (const accept of ['identity', 'gzip']) {
    const response = await request(`${base}/app.js`, { headers: { 'accept-encoding': accept } })
    const body = Buffer.from(await response.body.arrayBuffer())
    const decoded = accept === 'gzip' ? gunzipSync(body) : body
    t.equal(decoded.toString(), script)
    t.equal(response.headers['unencoded-digest'], sha256(script), `${accept}: of the decoded script`)
    t.equal(response.headers['signature-input'], `sig=("unencoded-digest";sf);keyid="${keyid}";tag="ed25519-integrity"`)
    t.match(String(response.headers.signature), /^sig=:[A-Za-z0-9+/]{86}==:$/)
    t.ok(verifiesByHand(response.headers, publicKey), `${accept}: the specification's signature base verifies`)
    t.notOk(verifiesByHand(response.headers, other.publicKey), 'and not with another key')
    t.equal(await verifiesWithLibrary(response.statusCode, response.headers, publicKey), true, `${accept}: http-message-signatures verifies it`)
  }
})

t.test('no signature where Chromium would refuse it: no header-section digest, a problem, or switched off', async (t) => {
  const base = await app()
  const stream = await request(`${base}/stream.js`)
  t.equal(Buffer.from(await stream.body.arrayBuffer()).toString(), script)
  t.equal(stream.trailers['unencoded-digest'], sha256(script), 'a stream has its digest only at its end')
  t.notOk('signature' in stream.headers || 'signature-input' in stream.headers, 'so it is not signed')
  for (const path of ['/missing.js', '/unsigned.js']) {
    const response = await request(`${base}${path}`)
    await response.body.dump()
    t.notOk('signature' in response.headers || 'signature-input' in response.headers, path)
  }
})

t.test('the key: a KeyObject or PEM, Ed25519 only, checked at registration', async (t) => {
  const pem = privateKey.export({ format: 'pem', type: 'pkcs8' }).toString()
  const server = Fastify()
  await server.register(fastifyDigestFields, { integritySignatures: { privateKey: pem } })
  server.get('/', async () => 'pem')
  const response = await server.inject('/')
  t.ok(verifiesByHand(response.headers, publicKey), 'a PEM key signs as the KeyObject does')
  const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey
  for (const integritySignatures of [{ privateKey: rsa }, { privateKey: publicKey }, { privateKey: 'not pem' }, {}, { privateKey, alg: 'ed25519' }, 'key', null]) {
    await t.rejects(async () => { await Fastify().register(fastifyDigestFields, { integritySignatures } as never) }, { code: 'FST_DIGEST_FIELDS_INVALID_OPTION' })
  }
})

t.test('one signature per distinct digest, however many responses carry it', async (t) => {
  const crypto = await import('node:crypto')
  let signed = 0
  const { integritySigner } = await t.mockImport<typeof import('../../lib/options/integrity-signatures.js')>('../../lib/options/integrity-signatures.js', {
    'node:crypto': { ...crypto, sign: (...args: Parameters<typeof crypto.sign>) => { signed++; return crypto.sign(...args) } }
  })
  const signer = integritySigner('test', { privateKey })
  const first = signer.signatureOf(sha256('a'))
  for (let i = 0; i < 5; i++) t.same(signer.signatureOf(sha256('a')), first)
  t.equal(signed, 1, 'signed once')
  signer.signatureOf(sha256('b'))
  t.equal(signed, 2, 'a second digest is signed once more')
  for (let i = 0; i < 4096; i++) signer.signatureOf(sha256(String(i)))
  t.equal(signed, 4098)
  signer.signatureOf(sha256('a'))
  t.equal(signed, 4099, 'at most 4096 are kept, the oldest dropped first')
})
