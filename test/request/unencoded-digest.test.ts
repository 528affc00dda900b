import * as zlib from 'node:zlib'
import t from 'tap'
import Fastify from 'fastify'
import fastifyCompress from '@fastify/compress'
import fastifyDigestFields, { type FastifyDigestFieldsOptions } from '../../lib/index.js'
import { hello, helloSha256, json, listen, member, problemTypes, rawRequest } from '../helpers.js'

// Unencoded-Digest covers the content with every content coding removed
// (draft-ietf-httpbis-unencoded-digest): the plugin decodes on the side, bounded by bodyLimit,
// and refuses what it cannot decode. Content-Digest and Repr-Digest still cover the bytes as sent.

const codings: Record<string, (data: Buffer) => Buffer> = {
  gzip: zlib.gzipSync,
  deflate: zlib.deflateSync,
  br: zlib.brotliCompressSync
}
const zstd = (zlib as { zstdCompressSync?: (data: Buffer) => Buffer }).zstdCompressSync

async function echo (options: FastifyDigestFieldsOptions = {}, bodyLimit?: number) {
  const app = Fastify(bodyLimit === undefined ? {} : { bodyLimit })
  await app.register(fastifyDigestFields, options)
  let handled = 0
  // The raw bytes, whatever the coding: this route reads what was sent.
  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
  app.post('/', async (request) => {
    handled++
    return { length: (request.body as Buffer).length, digest: request.digest && { fields: request.digest.fields, unencoded: Object.keys(request.digest.unencoded) } }
  })
  return { app, handled: () => handled }
}

t.test('without a content coding, Unencoded-Digest is the digest of the bytes received', async (t) => {
  const { app } = await echo({ problemTypes: 'registered' })
  const right = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'unencoded-digest': helloSha256, 'content-encoding': 'identity' } })
  t.equal(right.statusCode, 200)
  const sent = member('sha-256', 'other')
  const wrong = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'unencoded-digest': sent } })
  t.same(wrong.json().mismatched_digests, [{ algorithm: 'sha-256', provided_digest: sent.slice(8), header: 'Unencoded-Digest' }])
})

for (const [name, encode] of Object.entries(codings)) {
  t.test(`${name}: Unencoded-Digest covers the decoded content, Content-Digest the bytes sent`, async (t) => {
    const { app, handled } = await echo()
    const original = Buffer.from('the representation, before any coding '.repeat(2000))
    const encoded = encode(original)
    const send = (headers: Record<string, string>) => app.inject({
      method: 'POST', url: '/', payload: encoded, headers: { 'content-type': 'application/octet-stream', 'content-encoding': name, ...headers }
    })
    const both = await send({ 'unencoded-digest': member('sha-512', original), 'content-digest': member('sha-256', encoded) })
    t.equal(both.statusCode, 200, both.body)
    t.same(both.json(), { length: encoded.length, digest: { fields: ['content-digest', 'unencoded-digest'], unencoded: ['sha-512'] } })
    const ofEncoded = await send({ 'unencoded-digest': member('sha-512', encoded) })
    t.equal(ofEncoded.statusCode, 400, 'the digest of the coded bytes is not the unencoded digest')
    t.equal(ofEncoded.json().type, problemTypes + 'digest-mismatching-value')
    t.equal(handled(), 1)
  })
}

t.test('codings applied in turn are removed in reverse order', async (t) => {
  const { app } = await echo()
  const original = Buffer.from(hello)
  const encoded = zlib.brotliCompressSync(zlib.gzipSync(original))
  const response = await app.inject({
    method: 'POST', url: '/', payload: encoded, headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'gzip, br', 'unencoded-digest': helloSha256 }
  })
  t.equal(response.statusCode, 200, response.body)
})

t.test('zstd is decoded where the running Node has it, and refused where it has not', async (t) => {
  const { app } = await echo()
  const original = Buffer.from(hello)
  const response = await app.inject({
    method: 'POST', url: '/', payload: zstd?.(original) ?? original, headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'zstd', 'unencoded-digest': helloSha256 }
  })
  if (zstd === undefined) {
    t.equal(response.statusCode, 400)
    t.match(response.json().detail, /cannot remove the content coding zstd/)
  } else {
    t.equal(response.statusCode, 200, response.body)
  }
})

t.test('a coding the plugin cannot remove, or content that does not decode, is refused before the handler', async (t) => {
  const { app, handled } = await echo()
  const unknown = await app.inject({
    method: 'POST', url: '/', payload: hello, headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'compress', 'unencoded-digest': helloSha256 }
  })
  t.equal(unknown.statusCode, 400)
  t.same(unknown.json(), { type: 'about:blank', title: 'Bad Request', detail: 'Unencoded-Digest cannot be verified: this server cannot remove the content coding compress' })
  const corrupt = await app.inject({
    method: 'POST', url: '/', payload: Buffer.from('not gzip at all'), headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'gzip', 'unencoded-digest': helloSha256 }
  })
  t.equal(corrupt.statusCode, 400)
  t.match(corrupt.json().detail, /^Unencoded-Digest cannot be verified: the content does not decode: /)
  t.equal(handled(), 0)
  // Without Unencoded-Digest nothing needs decoding, and the coded bytes are verified as sent.
  const plain = await app.inject({
    method: 'POST', url: '/', payload: hello, headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'compress', 'content-digest': helloSha256 }
  })
  t.equal(plain.statusCode, 200)
})

t.test('a compressed bomb is not decoded past bodyLimit', async (t) => {
  const { app, handled } = await echo({}, 1024 * 1024)
  const bomb = zlib.gzipSync(Buffer.alloc(64 * 1024 * 1024))
  t.ok(bomb.length < 128 * 1024, `${bomb.length} bytes that decode to 64 MiB`)
  const response = await app.inject({
    method: 'POST', url: '/', payload: bomb, headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'gzip', 'unencoded-digest': member('sha-256', Buffer.alloc(64 * 1024 * 1024)) }
  })
  t.equal(response.statusCode, 413)
  t.same(response.json(), { type: 'about:blank', title: 'Content Too Large', detail: 'Unencoded-Digest cannot be verified: the content decodes to more than 1048576 bytes' })
  t.equal(handled(), 0)
})

t.test('Want-Unencoded-Digest is judged like the other preference fields', async (t) => {
  const { app } = await echo()
  app.get('/', async () => 'representation')
  const response = await app.inject({ method: 'GET', url: '/', headers: { 'want-unencoded-digest': 'md5=9' } })
  t.equal(response.statusCode, 400)
  t.same(response.json(), { type: problemTypes + 'digest-unsupported-algorithm', title: 'Unsupported Hashing Algorithm', 'unsupported-algorithm': 'md5' })
  t.equal(response.headers['want-unencoded-digest'], 'sha-256=10, sha-512=9, md5=0')
})

for (const compressFirst of [true, false]) {
  t.test(`with @fastify/compress decompressing requests, registered ${compressFirst ? 'before' : 'after'} the plugin`, async (t) => {
    const app = Fastify()
    if (compressFirst) await app.register(fastifyCompress)
    await app.register(fastifyDigestFields)
    if (!compressFirst) await app.register(fastifyCompress)
    app.post('/', async (request) => ({ body: request.body, fields: request.digest?.fields }))
    const encoded = zlib.gzipSync(hello)
    const send = (headers: Record<string, string>) => app.inject({ method: 'POST', url: '/', payload: encoded, headers: { ...json, 'content-encoding': 'gzip', ...headers } })
    const right = await send({ 'unencoded-digest': helloSha256, 'content-digest': member('sha-512', encoded) })
    t.equal(right.statusCode, 200, right.body)
    t.same(right.json(), { body: { hello: 'world' }, fields: ['content-digest', 'unencoded-digest'] })
    const wrong = await send({ 'unencoded-digest': member('sha-256', '{"hello": "World"}') })
    t.equal(wrong.statusCode, 400)
    t.equal(wrong.json().type, problemTypes + 'digest-mismatching-value')
  })
}

t.test('over a real socket, content that arrives in many chunks is decoded as it arrives', async (t) => {
  const { app } = await echo()
  const port = await listen(app)
  t.teardown(() => app.close())
  const original = Buffer.from(Array.from({ length: 20_000 }, (_, i) => `line ${i}\n`).join(''))
  const encoded = zlib.gzipSync(original)
  const chunks = Array.from({ length: Math.ceil(encoded.length / 4096) }, (_, i) => encoded.subarray(i * 4096, (i + 1) * 4096))
  const send = (digest: string) => rawRequest(port, ['POST / HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream', 'Content-Encoding: gzip',
    `Content-Length: ${encoded.length}`, `Unencoded-Digest: ${digest}`], chunks)
  t.equal((await send(member('sha-256', original))).status, 200)
  t.equal((await send(member('sha-256', encoded))).status, 400)
})
