import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdtempSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { brotliCompressSync, brotliDecompressSync, gunzipSync, gzipSync, inflateSync } from 'node:zlib'
import t from 'tap'
import Fastify from 'fastify'
import fastifyCompress from '@fastify/compress'
import fastifyStatic from '@fastify/static'
import { request } from 'undici'
import fastifyDigestFields, { staticFileDigests, type FastifyDigestFieldsOptions } from '../../lib/index.js'
import { fuzzSeed, h2Request, listen, pluginCountingOpens, seededBytes, type Tap } from '../helpers.js'

// Static files with their digests in the header section (response-digests.md): @fastify/static 10
// with staticFileDigests(), checked against `openssl dgst` of the file on disk and zlib's decoding
// of what the client received.

t.comment(`seed ${fuzzSeed}`)

/** `openssl dgst -sha256 -binary file | base64`, as a dictionary member. */
function openssl (path: string, algorithm: 'sha256' | 'sha512' = 'sha256'): string {
  const digest = execFileSync('openssl', ['dgst', `-${algorithm}`, '-binary', path]).toString('base64')
  return `${algorithm === 'sha256' ? 'sha-256' : 'sha-512'}=:${digest}:`
}
const sha256 = (data: string | Buffer): string => `sha-256=:${createHash('sha256').update(data).digest('base64')}:`

const root = mkdtempSync(join(tmpdir(), 'static-files-'))
t.teardown(() => rmSync(root, { recursive: true, force: true }))
// @fastify/compress 9 takes content whose first two bytes read as a zlib header (1 seed in about
// 400 of base64) for coded already, and sends it as it is under the Content-Encoding it announces:
// the files begin with text that cannot.
const small = `small\n${seededBytes(20 * 1024, fuzzSeed).toString('base64')}`
const large = `large\n${seededBytes(600 * 1024, fuzzSeed + 1).toString('hex')}`
writeFileSync(join(root, 'small.txt'), small)
writeFileSync(join(root, 'large.txt'), large)
writeFileSync(join(root, 'coded.js'), small)
writeFileSync(join(root, 'coded.js.br'), brotliCompressSync(small))
writeFileSync(join(root, 'coded.js.gz'), gzipSync(small))

async function server (t: Tap, options: FastifyDigestFieldsOptions = {},
  compress: 'none' | 'before' | 'after' = 'none', staticOptions: object = {}): Promise<string> {
  const app = Fastify()
  if (compress === 'before') await app.register(fastifyCompress, { threshold: 0 })
  await app.register(fastifyDigestFields, { fileDigests: { hashBeforeSending: 1024 * 1024 }, ...options })
  if (compress === 'after') await app.register(fastifyCompress, { threshold: 0 })
  await app.register(fastifyStatic, { root, setHeaders: staticFileDigests(), ...staticOptions })
  t.teardown(() => app.close())
  return `http://127.0.0.1:${await listen(app)}`
}

async function get (url: string, headers: Record<string, string> = {}, method: 'GET' | 'HEAD' = 'GET') {
  const response = await request(url, { method, headers })
  const body = Buffer.from(await response.body.arrayBuffer())
  return { status: response.statusCode, headers: response.headers, trailers: response.trailers, body }
}

t.test('a small file carries all three digests in the header section from its first response, with Content-Length', async (t) => {
  const base = await server(t)
  for (const round of [1, 2]) {
    const response = await get(`${base}/small.txt`)
    t.equal(response.status, 200)
    t.equal(response.body.toString(), small)
    t.equal(response.headers['content-length'], String(small.length), `round ${round}: Content-Length kept`)
    for (const name of ['repr-digest', 'content-digest', 'unencoded-digest']) {
      t.equal(response.headers[name], openssl(join(root, 'small.txt')), `round ${round}: ${name} in the header section`)
    }
    t.same(response.trailers, {}, 'no trailer section')
  }
})

t.test('a large file streams its first response with trailer digests and carries them in the header section from its second', async (t) => {
  const base = await server(t, { fileDigests: { hashBeforeSending: 64 * 1024 } })
  const first = await get(`${base}/large.txt`)
  t.equal(first.body.toString(), large)
  t.notOk('repr-digest' in first.headers, 'not known before sending')
  t.equal(first.trailers['repr-digest'], openssl(join(root, 'large.txt')))
  t.equal(first.trailers['content-digest'], openssl(join(root, 'large.txt')))
  t.equal(first.trailers['unencoded-digest'], openssl(join(root, 'large.txt')))
  const second = await get(`${base}/large.txt`)
  t.equal(second.headers['content-length'], String(large.length))
  for (const name of ['repr-digest', 'content-digest', 'unencoded-digest']) {
    t.equal(second.headers[name], openssl(join(root, 'large.txt')), `${name} in the header section`)
  }
  t.same(second.trailers, {})
})

t.test('a file changed between requests never gets the old digest, whatever its times say', async (t) => {
  const base = await server(t, { fileDigests: { hashBeforeSending: 64 * 1024 } })
  const path = join(root, 'changing.txt')
  const random = seededBytes(64, fuzzSeed + 2)
  for (let round = 0; round < 6; round++) {
    // Same size every time, and the modification time put back: only the content changes.
    const content = Buffer.from(`${round} ${random.toString('hex')}`.repeat(round % 2 === 0 ? 10 : 4000))
    writeFileSync(path, content)
    utimesSync(path, new Date(2020, 0, 1), new Date(2020, 0, 1))
    for (const ask of [1, 2]) {
      const response = await get(`${base}/changing.txt`)
      t.same(response.body, content)
      const digest = response.headers['unencoded-digest'] ?? response.trailers['unencoded-digest']
      t.equal(digest, sha256(content), `round ${round}, request ${ask}: the digest of the file as it is now`)
    }
  }
})

t.test('preCompressed files: Repr-Digest and Content-Digest of the coded file, Unencoded-Digest of the decoded one', async (t) => {
  const base = await server(t, {}, 'none', { preCompressed: true })
  for (const [accept, decode, file] of [['br', brotliDecompressSync, 'coded.js.br'], ['gzip', gunzipSync, 'coded.js.gz']] as const) {
    const response = await get(`${base}/coded.js`, { 'accept-encoding': accept })
    t.equal(response.headers['content-encoding'], accept)
    t.equal(decode(response.body).toString(), small)
    t.equal(response.headers['repr-digest'], openssl(join(root, file)))
    t.equal(response.headers['content-digest'], openssl(join(root, file)))
    t.equal(response.headers['unencoded-digest'], openssl(join(root, 'coded.js')), `${accept}: of the decoded bytes`)
  }
  const plain = await get(`${base}/coded.js`, { 'accept-encoding': 'identity' })
  t.equal(plain.headers['unencoded-digest'], openssl(join(root, 'coded.js')))
})

for (const compress of ['before', 'after'] as const) {
  t.test(`@fastify/compress registered ${compress} the plugin: Unencoded-Digest of the file in the header, the coded digests in trailers`, async (t) => {
    const base = await server(t, {}, compress)
    for (const [accept, decode] of [['gzip', gunzipSync], ['br', brotliDecompressSync], ['deflate', inflateSync]] as const) {
      const response = await get(`${base}/small.txt`, { 'accept-encoding': accept })
      t.equal(response.headers['content-encoding'], accept)
      // What was received, when it does not decode (see the files' first line above).
      const received = (): string => `${response.body.length} bytes from ${response.body.subarray(0, 16).toString('hex')}, ` +
        `headers ${JSON.stringify(response.headers)}, trailers ${JSON.stringify(response.trailers)}`
      t.equal(((): string => { try { return decode(response.body).toString() } catch (error) { return `${String(error)}: ${received()}` } })(), small)
      t.equal(response.headers['unencoded-digest'], openssl(join(root, 'small.txt')), `${accept}: known before sending`)
      t.equal(response.trailers['content-digest'], sha256(response.body), `${accept}: Content-Digest of the coded bytes sent`)
      t.equal(response.trailers['repr-digest'], sha256(response.body))
    }
  })
}

t.test('Range, HEAD and 304: the representation digests of the whole file, the part hashed as sent', async (t) => {
  const base = await server(t)
  const path = join(root, 'small.txt')
  const part = await get(`${base}/small.txt`, { range: 'bytes=100-199' })
  t.equal(part.status, 206)
  t.equal(part.body.toString(), small.slice(100, 200))
  t.equal(part.headers['repr-digest'], openssl(path), 'Repr-Digest: the whole file')
  t.equal(part.headers['unencoded-digest'], openssl(path))
  t.equal(part.trailers['content-digest'], sha256(small.slice(100, 200)), 'Content-Digest: the part')
  const head = await get(`${base}/small.txt`, {}, 'HEAD')
  t.equal(head.status, 200)
  t.equal(head.headers['repr-digest'], openssl(path))
  t.equal(head.headers['unencoded-digest'], openssl(path))
  t.notOk('content-digest' in head.headers, 'HEAD sends no content')
  const etag = String((await get(`${base}/small.txt`)).headers.etag)
  const notModified = await get(`${base}/small.txt`, { 'if-none-match': etag })
  t.equal(notModified.status, 304)
  t.equal(notModified.headers['repr-digest'], openssl(path), '304: the digests of the stored representation')
  t.notOk('content-digest' in notModified.headers)
  const asked = await get(`${base}/small.txt`, { 'want-repr-digest': 'sha-512=9', 'want-content-digest': 'sha-512=1' })
  t.equal(asked.headers['repr-digest'], openssl(path, 'sha512'), 'a preference is answered from the same file')
  t.equal(asked.headers['content-digest'], openssl(path, 'sha512'))
})

// The third attack on the response path saw a compressed 304 and a large file's 206 without
// Repr-Digest: neither digest is known there, and none is sent rather than a wrong one.
t.test('with @fastify/compress: a coded 304 carries no Repr-Digest, and a large file\'s range has one once the file was sent whole', async (t) => {
  const base = await server(t, { fileDigests: { hashBeforeSending: 64 * 1024 } }, 'after')
  const path = join(root, 'large.txt')
  const part = await get(`${base}/large.txt`, { range: 'bytes=100-199', 'accept-encoding': 'gzip' })
  t.equal(part.status, 206)
  t.equal(part.body.toString(), large.slice(100, 200), '@fastify/compress leaves a range uncoded')
  t.equal(part.trailers['content-digest'], sha256(large.slice(100, 200)), 'Content-Digest: the part')
  t.notOk('repr-digest' in part.headers, 'the whole file is not hashed for a range of it, nor known yet')
  const whole = await get(`${base}/large.txt`, { 'accept-encoding': 'gzip' })
  t.same(gunzipSync(whole.body).toString(), large)
  t.equal(whole.headers['unencoded-digest'] ?? whole.trailers['unencoded-digest'], openssl(path))
  const again = await get(`${base}/large.txt`, { range: 'bytes=100-199', 'accept-encoding': 'gzip' })
  t.equal(again.headers['repr-digest'], openssl(path), 'the whole file, found as it was sent')
  const etag = String(whole.headers.etag)
  const coded = await get(`${base}/large.txt`, { 'if-none-match': etag, 'accept-encoding': 'gzip' })
  t.equal(coded.status, 304)
  t.equal(coded.headers['content-encoding'], 'gzip', '@fastify/compress names the coding of the representation selected')
  t.notOk('repr-digest' in coded.headers, 'the coded representation\'s digest is not known')
  t.equal(coded.headers['unencoded-digest'], openssl(path), 'the representation with its coding removed is the file')
  const identity = await get(`${base}/large.txt`, { 'if-none-match': etag, 'accept-encoding': 'identity' })
  t.equal(identity.status, 304)
  t.equal(identity.headers['repr-digest'], openssl(path), 'uncoded, the representation is the file')
})

t.test('a reply.sendFile() from a route, and a file stream the application sends, use the file digests too', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields, { responseDigests: ['unencoded-digest'] })
  await app.register(fastifyStatic, { root, serve: false, setHeaders: staticFileDigests({ responseDigests: ['repr-digest'] }) })
  app.get('/download', async (_request, reply) => reply.sendFile('small.txt'))
  t.teardown(() => app.close())
  const base = `http://127.0.0.1:${await listen(app)}`
  const response = await get(`${base}/download`)
  t.equal(response.headers['repr-digest'], openssl(join(root, 'small.txt')))
  t.equal(response.headers['unencoded-digest'], openssl(join(root, 'small.txt')))
  t.notOk('content-digest' in response.headers, 'only the fields asked for')
})

t.test('staticFileDigests() refuses bad options and calls the application\'s setHeaders', async (t) => {
  t.throws(() => staticFileDigests({ responseDigests: ['digest' as never] }), { code: 'FST_DIGEST_FIELDS_INVALID_OPTION' })
  t.throws(() => staticFileDigests({ setHeaders: 'no' as never }), { code: 'FST_DIGEST_FIELDS_INVALID_OPTION' })
  const seen: string[] = []
  const base = await server(t, {}, 'none', { setHeaders: staticFileDigests({ setHeaders: (reply, path) => { seen.push(path); reply.header('x-seen', '1') } }) })
  const response = await get(`${base}/small.txt`)
  t.same(seen, [join(root, 'small.txt')])
  t.equal(response.headers['x-seen'], '1')
  t.equal(response.headers['unencoded-digest'], openssl(join(root, 'small.txt')))
})

t.test('the cache holds at most fileDigests.maxEntries versions, and a dropped one is hashed again', async (t) => {
  const base = await server(t, { fileDigests: { maxEntries: 2, hashBeforeSending: 1024 * 1024 } })
  for (let i = 0; i < 5; i++) writeFileSync(join(root, `many-${i}.txt`), `file ${i}`)
  for (const round of [1, 2]) {
    for (let i = 0; i < 5; i++) {
      const response = await get(`${base}/many-${i}.txt`)
      t.equal(response.headers['unencoded-digest'], sha256(`file ${i}`), `round ${round}, file ${i}`)
    }
  }
  for (const fileDigests of [{ maxEntries: -1 }, { hashBeforeSending: 1.5 }, { size: 1 }, 'all']) {
    await t.rejects(async () => { await Fastify().register(fastifyDigestFields, { fileDigests } as never) }, { code: 'FST_DIGEST_FIELDS_INVALID_OPTION' }, JSON.stringify(fileDigests))
  }
})

t.test('a settled file is hashed once: later responses read it only to send it', async (t) => {
  // The committed fixtures have not changed for longer than the two seconds a version must settle.
  const fixtures = new URL('../fixtures/static/', import.meta.url).pathname
  const { opened, plugin: { default: plugin, staticFileDigests: mark } } = await pluginCountingOpens(t)
  t.ok(statSync(join(fixtures, 'app.js')).ctimeMs < Date.now() - 2000, 'the fixture has settled')
  const app = Fastify()
  await app.register(plugin)
  await app.register(fastifyStatic, { root: fixtures, setHeaders: mark() })
  const first = await app.inject('/app.js')
  t.equal(first.headers['unencoded-digest'], openssl(join(fixtures, 'app.js')), 'hashed before its first response')
  t.same(opened, [join(fixtures, 'app.js')], 'opened once to be hashed')
  for (let i = 0; i < 5; i++) {
    const later = await app.inject('/app.js')
    t.equal(later.headers['unencoded-digest'], openssl(join(fixtures, 'app.js')))
    t.equal(later.headers['content-length'], String(statSync(join(fixtures, 'app.js')).size))
  }
  t.equal(opened.length, 1, 'and never again')
})

t.test('over HTTP/2: the same header-section digests, and a signed file', async (t) => {
  const { generateKeyPairSync } = await import('node:crypto')
  const app = Fastify({ http2: true })
  await app.register(fastifyDigestFields, { integritySignatures: { privateKey: generateKeyPairSync('ed25519').privateKey } })
  await app.register(fastifyCompress, { threshold: 0 })
  await app.register(fastifyStatic, { root, setHeaders: staticFileDigests() })
  t.teardown(() => app.close())
  const port = await listen(app)
  const plain = await h2Request(port, { ':path': '/small.txt' })
  t.equal(plain.body, small)
  t.equal(plain.headers['content-length'], String(small.length))
  for (const name of ['repr-digest', 'content-digest', 'unencoded-digest']) t.equal(plain.headers[name], openssl(join(root, 'small.txt')), name)
  t.match(plain.headers['signature-input'], /^sig=\("unencoded-digest";sf\);keyid="[A-Za-z0-9+/]{43}=";tag="ed25519-integrity"$/)
  const coded = await h2Request(port, { ':path': '/small.txt', 'accept-encoding': 'gzip' })
  t.equal(coded.headers['content-encoding'], 'gzip')
  t.equal(coded.headers['unencoded-digest'], openssl(join(root, 'small.txt')), 'before the coding, in the header section')
  t.ok(coded.headers.signature, 'so it is signed')
})

t.test('a hook that changes a served file\'s bytes: the digests are of the bytes it sends instead', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  // A global onSend hook runs before the route's own: it replaces the file stream with other bytes.
  app.addHook('onSend', async (_request, reply, payload) => reply.statusCode === 200 && payload !== null ? 'rewritten' : payload)
  await app.register(fastifyStatic, { root, setHeaders: staticFileDigests() })
  t.teardown(() => app.close())
  const response = await get(`http://127.0.0.1:${await listen(app)}/small.txt`)
  t.equal(response.body.toString(), 'rewritten')
  for (const name of ['repr-digest', 'content-digest', 'unencoded-digest']) t.equal(response.headers[name], sha256('rewritten'), name)
})
