import { createHash } from 'node:crypto'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { connect } from 'node:net'
import { Readable } from 'node:stream'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyMultipart from '@fastify/multipart'
import { request } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import { fuzzSeed, h2Request, listen, randomChunks, seededBytes, seededRandom, type Tap } from '../helpers.js'

// Issue 19, part 2: request.verifiedFiles() commits files only once the whole request verified.
// The oracle is the folder itself: after every request, the destination holds exactly the files of
// the verified uploads, byte for byte, and no temporary file is left, whatever failed or aborted.

t.comment(`seed ${fuzzSeed}`)
const random = seededRandom(fuzzSeed)
const sha256 = (data: Buffer | string): string => `sha-256=:${createHash('sha256').update(data).digest('base64')}:`
const other = sha256('other content')

interface Server { url: string, port: number, folder: string, settled: () => Promise<void> }

/** A server whose handlers count when they are done, so that a test can wait for them rather than for time. */
async function server (t: Tap, http2 = false): Promise<Server> {
  const folder = mkdtempSync(join(tmpdir(), 'verified-files-'))
  t.teardown(() => rmSync(folder, { recursive: true, force: true }))
  const app = Fastify({ bodyLimit: 64 * 1024 * 1024, http2 } as object) as unknown as FastifyInstance
  await app.register(fastifyDigestFields, { required: true })
  await app.register(fastifyMultipart, { limits: { fileSize: 64 * 1024 * 1024 } })
  // A request is done once its handler returned and its response went or its client left, after
  // the plugin's own hooks (registered first).
  let running = 0
  let idle: (() => void) | null = null
  const stages = new WeakMap<object, number>()
  const stage = (request: object): void => {
    const done = (stages.get(request) ?? 0) + 1
    stages.set(request, done)
    if (done === 2 && --running === 0) idle?.()
  }
  app.addHook('onRequest', async () => { running++ })
  app.addHook('onResponse', async (request) => stage(request))
  app.addHook('onRequestAbort', async (request) => stage(request))
  app.addHook('onRoute', (route) => {
    const handler = route.handler
    route.handler = async function (request, reply) {
      try {
        return await handler.call(this, request, reply)
      } finally {
        stage(request)
      }
    }
  })
  app.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
  app.put('/raw/:name', async (request) => {
    const files = request.verifiedFiles()
    await files.save(request.raw, join(folder, (request.params as { name: string }).name))
    return { verified: (await files.commit()).digest?.fields ?? null }
  })
  app.post('/file', async (request) => {
    const files = request.verifiedFiles()
    const data = await request.file()
    if (data === undefined) return { files: 0 }
    await files.save(data.file, join(folder, data.filename))
    await files.commit()
    return { files: 1 }
  })
  app.post('/parts', async (request) => {
    const files = request.verifiedFiles()
    let count = 0
    for await (const part of request.parts()) {
      if (part.type === 'file') {
        await files.save(part.file, join(folder, part.filename))
        count++
      }
    }
    await files.commit()
    return { files: count }
  })
  app.put('/forgetful/:name', async (request) => {
    await request.verifiedFiles().save(request.raw, join(folder, (request.params as { name: string }).name))
    return { committed: false }
  })
  app.put('/verdict', async (request) => ({ verdict: await request.digestVerdict() }))
  // A file made from something else than the content, committed only if the content verified.
  app.put('/derived/:name', async (request) => {
    const files = request.verifiedFiles()
    await files.save(Readable.from([`a receipt for ${request.headers['content-length']} bytes`]), join(folder, (request.params as { name: string }).name))
    return { verified: (await files.commit()).digest?.fields ?? null }
  })
  t.teardown(() => app.close())
  const port = await listen(app)
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    folder,
    settled: async () => {
      if (running > 0) await new Promise<void>((resolve) => { idle = resolve })
    }
  }
}

function multipart (files: Array<[string, Buffer]>, boundary = 'verified-files-boundary'): Buffer {
  return Buffer.concat([
    ...files.flatMap(([name, content]) => [
      Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="${name}"\r\ncontent-type: application/octet-stream\r\n\r\n`),
      content,
      Buffer.from('\r\n')
    ]),
    Buffer.from(`--${boundary}--\r\n`)
  ])
}
const multipartType = 'multipart/form-data; boundary=verified-files-boundary'

t.test('request.raw: a verified upload is moved into place, a mismatching one leaves nothing', async (t) => {
  const { url, folder } = await server(t)
  const content = seededBytes(3 * 1024 * 1024, fuzzSeed)
  const good = await request(`${url}/raw/good.bin`, { method: 'PUT', body: content, headers: { 'content-type': 'application/octet-stream', 'content-digest': sha256(content) } })
  t.same(await good.body.json(), { verified: ['content-digest'] })
  const bad = await request(`${url}/raw/bad.bin`, { method: 'PUT', body: content, headers: { 'content-type': 'application/octet-stream', 'content-digest': other } })
  t.equal(bad.statusCode, 400)
  t.match(await bad.body.json(), { type: /digest-mismatching-value$/ })
  t.same(readdirSync(folder), ['good.bin'], 'only the verified file, and no temporary file')
  t.ok(readFileSync(join(folder, 'good.bin')).equals(content))
})

t.test('file() and parts(): every part is committed only once the whole request verified', async (t) => {
  const { url, folder } = await server(t)
  const parts: Array<[string, Buffer]> = [['a.bin', seededBytes(200_000, fuzzSeed + 1)], ['b.bin', seededBytes(10, fuzzSeed + 2)], ['c.bin', seededBytes(1_000_000, fuzzSeed + 3)]]
  const body = multipart(parts)
  const tampered = await request(`${url}/parts`, { method: 'POST', body, headers: { 'content-type': multipartType, 'content-digest': other } })
  t.equal(tampered.statusCode, 400)
  await tampered.body.dump()
  t.same(readdirSync(folder), [], 'a tampered request commits none of its parts, the first included')
  const single = multipart([parts[0] as [string, Buffer]])
  const tamperedFile = await request(`${url}/file`, { method: 'POST', body: single, headers: { 'content-type': multipartType, 'content-digest': other } })
  t.equal(tamperedFile.statusCode, 400)
  await tamperedFile.body.dump()
  t.same(readdirSync(folder), [])
  // A field after the file: the file ends before the verdict, which commit() then waits for.
  const withField = Buffer.concat([multipart([parts[0] as [string, Buffer]]).subarray(0, -'--verified-files-boundary--\r\n'.length),
    Buffer.from(`--verified-files-boundary\r\ncontent-disposition: form-data; name="note"\r\n\r\n${'after the file '.repeat(500)}\r\n--verified-files-boundary--\r\n`)])
  const tamperedLater = await request(`${url}/file`, { method: 'POST', body: withField, headers: { 'content-type': multipartType, 'content-digest': other } })
  t.equal(tamperedLater.statusCode, 400)
  t.match(await tamperedLater.body.json(), { type: /digest-mismatching-value$/ })
  t.same(readdirSync(folder), [], 'a file that ended before the verdict is removed when it fails')
  const verified = await request(`${url}/parts`, { method: 'POST', body, headers: { 'content-type': multipartType, 'content-digest': sha256(body) } })
  t.same(await verified.body.json(), { files: 3 })
  const file = await request(`${url}/file`, { method: 'POST', body: multipart([['d.bin', Buffer.from('d')]]), headers: { 'content-type': multipartType, 'content-digest': sha256(multipart([['d.bin', Buffer.from('d')]])) } })
  t.same(await file.body.json(), { files: 1 })
  t.same(readdirSync(folder).sort(), ['a.bin', 'b.bin', 'c.bin', 'd.bin'])
  for (const [name, content] of parts) t.ok(readFileSync(join(folder, name)).equals(content), name)
})

t.test('aborts at random points leave no file and no temporary file', async (t) => {
  const { port, folder, settled } = await server(t)
  const parts: Array<[string, Buffer]> = [['x.bin', seededBytes(300_000, fuzzSeed + 4)], ['y.bin', seededBytes(300_000, fuzzSeed + 5)]]
  const body = multipart(parts)
  for (let i = 0; i < 12; i++) {
    const [path, type, content] = i % 2 === 0 ? ['/parts', multipartType, body] : ['/raw/z.bin', 'application/octet-stream', body]
    const cut = Math.floor(random() * content.length)
    const socket = connect(port, '127.0.0.1')
    await new Promise((resolve) => socket.once('connect', resolve))
    socket.write(`${path === '/parts' ? 'POST' : 'PUT'} ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: ${type}\r\ncontent-length: ${content.length}\r\ncontent-digest: ${sha256(content)}\r\n\r\n`)
    socket.write(content.subarray(0, cut))
    // Ends the connection mid-upload once what was sent is flushed.
    await new Promise<void>((resolve) => socket.end(() => resolve()))
    socket.destroy()
    await settled()
    // A client gone between two parts fails the handler's parts() loop while the removal the
    // request's close started is still running: wait for that condition, within a bound.
    const deadline = Date.now() + 10_000
    while (readdirSync(folder).length > 0 && Date.now() < deadline) await new Promise((resolve) => setImmediate(resolve))
    t.same(readdirSync(folder), [], `cut at ${cut} of ${path}`)
  }
})

t.test('a file saved before the content came is committed or removed by the verdict commit() waits for', async (t) => {
  const { url, folder } = await server(t)
  const content = seededBytes(500_000, fuzzSeed + 6)
  const failed = await request(`${url}/derived/failed.txt`, { method: 'PUT', body: content, headers: { 'content-type': 'application/octet-stream', 'content-digest': other } })
  t.equal(failed.statusCode, 400)
  t.match(await failed.body.json(), { type: /digest-mismatching-value$/ })
  t.same(readdirSync(folder), [])
  const passed = await request(`${url}/derived/passed.txt`, { method: 'PUT', body: content, headers: { 'content-type': 'application/octet-stream', 'content-digest': sha256(content) } })
  t.same(await passed.body.json(), { verified: ['content-digest'] })
  t.same(readdirSync(folder), ['passed.txt'])
})

t.test('a VerifiedFiles committed or discarded takes no more files', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.post('/', async (request) => {
    const files = request.verifiedFiles()
    t.equal(request.verifiedFiles(), files, 'one a request')
    await files.commit()
    await t.rejects(files.save(Readable.from(['late']), join(tmpdir(), 'never')), /already committed or discarded/)
    return 'ok'
  })
  t.equal((await app.inject({ method: 'POST', url: '/', payload: 'x', headers: { 'content-type': 'text/plain' } })).body, 'ok')
})

t.test('a handler that saves and never commits leaves nothing: the files are removed before its answer goes', async (t) => {
  const { url, folder, settled } = await server(t)
  const response = await request(`${url}/forgetful/kept.bin`, { method: 'PUT', body: 'content', headers: { 'content-type': 'application/octet-stream', 'content-digest': sha256('content') } })
  t.same(await response.body.json(), { committed: false })
  t.same(readdirSync(folder), [], 'removed before the answer went')
  await settled()
  t.same(readdirSync(folder), [])
})

t.test('digestVerdict() gives what was verified, reading what nobody read', async (t) => {
  const { url } = await server(t)
  const verified = await request(`${url}/verdict`, { method: 'PUT', body: 'content', headers: { 'content-type': 'application/octet-stream', 'content-digest': sha256('content') } })
  t.match(await verified.body.json(), { verdict: { fields: ['content-digest'] } })
  const failed = await request(`${url}/verdict`, { method: 'PUT', body: 'content', headers: { 'content-type': 'application/octet-stream', 'content-digest': other } })
  t.equal(failed.statusCode, 400)
  t.match(await failed.body.json(), { type: /digest-mismatching-value$/ })
})

t.test('over HTTP/2: the same commits, in DATA frames of random sizes', async (t) => {
  const { port, folder } = await server(t, true)
  const content = seededBytes(700_000, fuzzSeed + 7)
  const chunks = randomChunks(content, 64 * 1024, random)
  const headers = { ':method': 'PUT', 'content-type': 'application/octet-stream' }
  const good = await h2Request(port, { ...headers, ':path': '/raw/h2.bin', 'content-digest': sha256(content) }, chunks)
  t.same(JSON.parse(good.body), { verified: ['content-digest'] })
  const bad = await h2Request(port, { ...headers, ':path': '/raw/h2-bad.bin', 'content-digest': other }, chunks)
  t.equal(bad.status, 400)
  t.same(readdirSync(folder), ['h2.bin'])
  t.ok(readFileSync(join(folder, 'h2.bin')).equals(content))
})
