import { createHash } from 'node:crypto'
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { connect as h2connect } from 'node:http2'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyMultipart from '@fastify/multipart'
import { request } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import { fuzzSeed, listen, seededBytes, type Tap } from '../helpers.js'

// What the attack on issue 19's first two parts found, pinned: file() with more files than the
// handler reads, an HTTP/2 mismatch during parts(), and a rename that fails.

t.comment(`seed ${fuzzSeed}`)
const sha256 = (data: Buffer): string => `sha-256=:${createHash('sha256').update(data).digest('base64')}:`
const wrong = `sha-256=:${Buffer.alloc(32).toString('base64')}:`
const part = (name: string, data: Buffer): Buffer => Buffer.concat([
  Buffer.from(`--B\r\nContent-Disposition: form-data; name="${name}"; filename="${name}.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`), data, Buffer.from('\r\n')])
const form = (...parts: Buffer[]): Buffer => Buffer.concat([...parts, Buffer.from('--B--\r\n')])
const multipart = 'multipart/form-data; boundary=B'

async function app (t: Tap, http2 = false): Promise<{ url: string, port: number, folder: string }> {
  const folder = mkdtempSync(join(tmpdir(), 'issue-19-'))
  t.teardown(() => rmSync(folder, { recursive: true, force: true }))
  const server = Fastify({ http2, bodyLimit: 16 * 1024 * 1024 } as object) as unknown as FastifyInstance
  // A reader that stands still is cut off after stallTimeout: short here, as nothing else waits.
  await server.register(fastifyDigestFields, { stallTimeout: 200 })
  await server.register(fastifyMultipart, { limits: { fileSize: 16 * 1024 * 1024 } })
  server.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
  server.post('/file', { config: { digest: { required: true } } }, async (request) => {
    const files = request.verifiedFiles()
    const data = await request.file()
    await files.save(data?.file as NodeJS.ReadableStream as never, join(folder, 'first.bin'))
    await files.commit()
    return { ok: true }
  })
  server.post('/forms', { config: { digest: { required: true } } }, async (request) => {
    const files = request.verifiedFiles()
    let count = 0
    for await (const each of request.parts()) {
      if (each.type === 'file') await files.save(each.file, join(folder, `${++count}.bin`))
    }
    await files.commit()
    return { files: count }
  })
  server.put('/files/:id', async (request) => {
    const files = request.verifiedFiles()
    await files.save(request.raw, join(folder, (request.params as { id: string }).id))
    return { verified: (await files.commit()).digest?.fields ?? null }
  })
  t.teardown(() => server.close())
  const port = await listen(server)
  return { url: `http://127.0.0.1:${port}`, port, folder }
}

t.test('file() with later files the handler never reads: commit() takes the rest from the stalled reader for the verdict', async (t) => {
  const { url, folder } = await app(t)
  const first = seededBytes(1_000_000, fuzzSeed)
  const body = form(part('a', first), part('b', seededBytes(1_000_000, fuzzSeed + 1)), part('c', seededBytes(500_000, fuzzSeed + 2)))
  const verified = await request(`${url}/file`, { method: 'POST', body, headers: { 'content-type': multipart, 'content-digest': sha256(body) } })
  t.same(await verified.body.json(), { ok: true })
  t.same(readdirSync(folder), ['first.bin'])
  rmSync(join(folder, 'first.bin'))
  const failed = await request(`${url}/file`, { method: 'POST', body, headers: { 'content-type': multipart, 'content-digest': wrong } })
  t.equal(failed.statusCode, 400)
  t.match(await failed.body.json(), { type: /digest-mismatching-value$/ })
  t.same(readdirSync(folder), [], 'nothing committed, nothing left')
})

t.test('HTTP/2: a mismatch found while parts() saves a file is answered with the problem, not a 500', async (t) => {
  const { port, folder } = await app(t, true)
  const session = h2connect(`http://127.0.0.1:${port}`)
  t.teardown(() => session.close())
  for (let i = 0; i < 10; i++) {
    const body = form(part('a', seededBytes(60_000, fuzzSeed + 10 + i)), part('b', seededBytes(60_000, fuzzSeed + 20 + i)))
    const stream = session.request({ ':method': 'POST', ':path': '/forms', 'content-type': multipart, 'content-digest': wrong })
    let text = ''
    stream.on('data', (chunk: Buffer) => { text += chunk.toString() })
    const response = new Promise<Record<string, unknown>>((resolve) => stream.once('response', resolve))
    stream.end(body)
    await new Promise((resolve) => stream.once('close', resolve))
    t.equal((await response)[':status'], 400, `request ${i}`)
    t.match(JSON.parse(text), { type: /digest-mismatching-value$/ })
  }
  t.same(readdirSync(folder), [])
})

t.test('a rename that fails leaves no temporary file', async (t) => {
  const { url, folder } = await app(t)
  mkdirSync(join(folder, 'taken'))
  const body = Buffer.from('hello')
  const response = await request(`${url}/files/taken`, { method: 'PUT', body, headers: { 'content-type': 'application/octet-stream', 'content-digest': sha256(body) } })
  t.equal(response.statusCode, 500, 'the application passed EISDIR on')
  await response.body.dump()
  t.same(readdirSync(folder), ['taken'])
})
