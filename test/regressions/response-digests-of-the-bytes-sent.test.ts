import { createHash, generateKeyPairSync } from 'node:crypto'
import fs, { createReadStream, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import Fastify from 'fastify'
import fastifyStatic from '@fastify/static'
import { request } from 'undici'
import fastifyDigestFields, { staticFileDigests } from '../../lib/index.js'
import { listen, pluginCountingOpens } from '../helpers.js'

// What the attack on issue 17 found, pinned: response digests are of the bytes sent or absent,
// an error answer carries none of an earlier payload's fields, and cold files are hashed once.

const sha256 = (data: string | Buffer): string => `sha-256=:${createHash('sha256').update(data).digest('base64')}:`
const folder = mkdtempSync(join(tmpdir(), 'issue-17-'))
t.teardown(() => rmSync(folder, { recursive: true, force: true }))
const file = join(folder, 'a.txt')
// A byte order mark, then "hi ", a Latin-1 é that is not UTF-8, and a newline.
writeFileSync(file, Buffer.from([0xef, 0xbb, 0xbf, 0x68, 0x69, 0x20, 0xe9, 0x0a]))

async function raw (port: number, path: string): Promise<string> {
  const socket = connect(port, '127.0.0.1')
  let received = ''
  socket.on('data', (chunk: Buffer) => { received += chunk.toString('latin1') })
  socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)
  await new Promise<void>((resolve) => socket.once('close', () => resolve()))
  return received
}

t.test('a stream that fails before its first byte is answered like without the plugin: one framing, no digest', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields, { responseDigests: ['unencoded-digest', 'content-digest'], integritySignatures: { privateKey: generateKeyPairSync('ed25519').privateKey } })
  app.get('/missing', async (_request, reply) => reply.send(createReadStream(join(folder, 'missing'))))
  const failing = { ...fs, read: ((...args: unknown[]) => (args.at(-1) as (error: Error) => void)(Object.assign(new Error('EIO: i/o error, read'), { code: 'EIO' }))) as never }
  app.get('/eio', async (_request, reply) => reply.type('text/javascript').send(createReadStream(file, { fs: failing } as never)))
  t.teardown(() => app.close())
  const port = await listen(app)
  for (const path of ['/missing', '/eio']) {
    const head = (await raw(port, path)).split('\r\n\r\n')[0] as string
    t.match(head, /^HTTP\/1\.1 500 /, path)
    t.notMatch(head, /transfer-encoding/i, `${path}: Content-Length alone frames it`)
    t.notMatch(head, /^(trailer|unencoded-digest|content-digest|signature|signature-input):/im, `${path}: none of the stream's fields`)
    const response = await request(`http://127.0.0.1:${port}${path}`)
    t.equal(response.statusCode, 500, `${path}: a client parses it`)
    await response.body.dump()
  }
})

t.test('file streams whose bytes are not the file\'s get the digest of what they send', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields, { responseDigests: ['unencoded-digest', 'content-digest'] })
  const streams: Record<string, () => Promise<fs.ReadStream> | fs.ReadStream> = {
    '/utf8': () => createReadStream(file, 'utf8'),
    '/latin1': () => createReadStream(file, { encoding: 'latin1' }),
    '/hex': () => createReadStream(file, { encoding: 'hex' }),
    '/unshift': () => {
      const stream = createReadStream(file)
      stream.unshift(Buffer.from('INJECTED '))
      return stream
    },
    '/bom-stripped': async () => {
      const stream = createReadStream(file)
      await new Promise<void>((resolve) => stream.once('readable', () => resolve()))
      stream.read(3)
      return stream
    },
    '/proc': () => createReadStream('/proc/self/stat')
  }
  for (const [path, make] of Object.entries(streams)) app.get(path, async (_request, reply) => reply.type('text/plain').send(await make()))
  t.teardown(() => app.close())
  const port = await listen(app)
  for (const path of Object.keys(streams)) {
    const response = await request(`http://127.0.0.1:${port}${path}`)
    const body = Buffer.from(await response.body.arrayBuffer())
    for (const name of ['unencoded-digest', 'content-digest']) {
      t.equal(response.headers[name] ?? response.trailers[name], sha256(body), `${path}: ${name} of the ${body.length} bytes sent`)
    }
  }
})

t.test('requests that arrive together for a file not known yet share one hash; a signed HEAD hashes nothing', async (t) => {
  const { opened, plugin: { default: plugin, staticFileDigests: mark } } = await pluginCountingOpens(t)
  const root = mkdtempSync(join(tmpdir(), 'issue-17-cold-'))
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  writeFileSync(join(root, 'cold.js'), Buffer.alloc(300_000, 'a'))
  writeFileSync(join(root, 'large.js'), Buffer.alloc(300_000, 'b'))
  const app = Fastify()
  await app.register(plugin, { fileDigests: { hashBeforeSending: 1024 * 1024 } })
  await app.register(fastifyStatic, { root, setHeaders: mark() })
  const signed = Fastify()
  await signed.register(plugin, { fileDigests: { hashBeforeSending: 1024 }, integritySignatures: { privateKey: generateKeyPairSync('ed25519').privateKey } })
  await signed.register(fastifyStatic, { root, setHeaders: mark() })
  t.teardown(() => Promise.all([app.close(), signed.close()]))
  const responses = await Promise.all(Array.from({ length: 10 }, async () => await app.inject('/cold.js')))
  for (const response of responses) t.equal(response.headers['unencoded-digest'], sha256(Buffer.alloc(300_000, 'a')))
  t.same(opened, [join(root, 'cold.js')], 'ten concurrent first requests, one hash')
  const head = await signed.inject({ method: 'HEAD', url: '/large.js' })
  t.equal(head.statusCode, 200)
  t.notOk('signature' in head.headers || 'unencoded-digest' in head.headers, 'a large file not known yet: no digest and no signature on HEAD')
  t.equal(opened.length, 1, 'and no hash')
})

t.test('deprecated algorithms are never signed; reprDigest takes any Uint8Array; option messages show the number', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields, { integritySignatures: { privateKey: generateKeyPairSync('ed25519').privateKey } })
  app.get('/md5', { config: { digest: { algorithms: ['md5'] } } }, async () => 'hello')
  app.get('/uint8', async (_request, reply) => {
    const digest = createHash('sha256').update('hello').digest()
    // A JavaScript application may pass what Web Crypto gives.
    return reply.reprDigest({ 'sha-256': new Uint8Array(digest.buffer, digest.byteOffset, digest.length) as Buffer }).send('hello')
  })
  const md5 = await app.inject('/md5')
  t.match(md5.headers['unencoded-digest'], /^md5=/)
  t.notOk('signature' in md5.headers, 'Chromium checks only sha-256 and sha-512: an md5 digest is not signed')
  const uint8 = await app.inject({ url: '/uint8', headers: { 'want-repr-digest': 'sha-256=1' } })
  t.equal(uint8.statusCode, 200)
  t.equal(uint8.headers['repr-digest'], sha256('hello'))
  await t.rejects(async () => { await Fastify().register(fastifyDigestFields, { fileDigests: { maxEntries: Infinity } }) }, /maxEntries must be a whole number, got Infinity/)
})

t.test('staticFileDigests() with a file deleted before its stream opens: a well-formed 404 or 500, no digest', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'issue-17-deleted-'))
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  const app = Fastify()
  await app.register(fastifyDigestFields, { responseDigests: ['unencoded-digest'] })
  // Stands for a deploy that removes a file between @fastify/static's stat and its open.
  app.addHook('onSend', async (request, _reply, payload) => {
    if (request.url === '/gone.js') rmSync(join(root, 'gone.js'), { force: true })
    return payload
  })
  await app.register(fastifyStatic, { root, setHeaders: staticFileDigests() })
  t.teardown(() => app.close())
  writeFileSync(join(root, 'gone.js'), 'console.log(1)')
  const head = (await raw(await listen(app), '/gone.js')).split('\r\n\r\n')[0] as string
  t.match(head, /^HTTP\/1\.1 (404|500) /)
  t.notMatch(head, /transfer-encoding|unencoded-digest|^trailer:/im)
})
