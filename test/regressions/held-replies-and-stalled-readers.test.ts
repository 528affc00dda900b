import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { connect as h2connect, constants as h2constants } from 'node:http2'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable, Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyMultipart from '@fastify/multipart'
import { request } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import { fuzzSeed, h2Request, listen, member, seededBytes, watchProcess, type Tap } from '../helpers.js'

// What the third attack (issue 25) found of the plugin's waits, pinned, each test named after the
// failure it found: a reply held for content nobody reads, a client or reader that stands still, a
// reader let go before the end. (Its other findings are in stored-upload-states, file-rewritten-
// while-sent and client-decompression-bomb.)

t.comment(`seed ${fuzzSeed}`)
const wrong = `sha-256=:${Buffer.alloc(32).toString('base64')}:`
const part = (name: string, data: Buffer): Buffer => Buffer.concat([
  Buffer.from(`--B\r\nContent-Disposition: form-data; name="${name}"; filename="${name}.bin"\r\n` +
    'Content-Type: application/octet-stream\r\n\r\n'), data, Buffer.from('\r\n')])
const form = (...parts: Buffer[]): Buffer => Buffer.concat([...parts, Buffer.from('--B--\r\n')])
const multipart = 'multipart/form-data; boundary=B'

function folder (t: Tap): string {
  const path = mkdtempSync(join(tmpdir(), 'issue-25-'))
  t.teardown(() => rmSync(path, { recursive: true, force: true }))
  return path
}

/** A Writable that counts what it is given, slowly enough that its pipe pauses now and then. */
function counter (): Writable & { bytes: number } {
  const sink = new Writable({
    highWaterMark: 1024,
    write (chunk: Buffer, _encoding, callback) {
      sink.bytes += chunk.length
      setImmediate(callback)
    }
  }) as Writable & { bytes: number }
  sink.bytes = 0
  return sink
}

t.test('a success reply is no longer held for ever when a second multipart file nobody reads follows', async (t) => {
  const escaped = watchProcess(t)
  for (const http2 of [false, true]) {
    const app = Fastify({ http2 } as object) as unknown as FastifyInstance
    t.teardown(() => app.close())
    await app.register(fastifyDigestFields, { stallTimeout: 200 })
    await app.register(fastifyMultipart, { limits: { fileSize: 8 * 1024 * 1024 } })
    app.post('/file', async (request) => ({ first: (await (await request.file())?.toBuffer())?.length }))
    app.post('/parts', async (request) => {
      for await (const each of request.parts()) {
        if (each.type === 'file') return { first: (await each.toBuffer()).length }
      }
      return { first: null }
    })
    const port = await listen(app)
    const body = form(part('a', seededBytes(10_000, fuzzSeed)), part('b', seededBytes(1_000_000, fuzzSeed + 1)))
    for (const path of ['/file', '/parts']) {
      for (const digest of [member('sha-256', body), null]) {
        const headers = { 'content-type': multipart, ...(digest === null ? {} : { 'content-digest': digest }) }
        const what = `${http2 ? 'HTTP/2' : 'HTTP/1.1 chunked'} ${path} ${digest === null ? 'without a field' : 'with a Content-Digest'}`
        const answer = http2
          ? await h2Request(port, { ':method': 'POST', ':path': path, ...headers }, [body.subarray(0, 300_000), body.subarray(300_000)])
          : await request(`http://127.0.0.1:${port}${path}`, { method: 'POST', headers, body: Readable.from([body.subarray(0, 300_000), body.subarray(300_000)]) })
            .then(async (response) => ({ status: response.statusCode, body: await response.body.text() }))
        t.equal(answer.status, 200, what)
        t.same(JSON.parse(answer.body), { first: 10_000 }, what)
      }
      const refused = http2
        ? await h2Request(port, { ':method': 'POST', ':path': path, 'content-type': multipart, 'content-digest': wrong }, [body])
        : await request(`http://127.0.0.1:${port}${path}`, { method: 'POST', headers: { 'content-type': multipart, 'content-digest': wrong }, body })
          .then(async (response) => ({ status: response.statusCode, body: await response.body.text() }))
      t.equal(refused.status, 400, `${path}: the reply became the problem`)
    }
  }
  t.same(escaped, [])
})

t.test('a client that stops sending while a reply waits for the verdict is disconnected, never left waiting', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields, { stallTimeout: 100 })
  app.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
  app.put('/early', async (_request, reply) => reply.code(202).send({ accepted: true }))
  const port = await listen(app)
  const socket = connect({ host: '127.0.0.1', port })
  const received: Buffer[] = []
  socket.on('data', (chunk: Buffer) => received.push(chunk))
  socket.on('error', () => {})
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()))
  socket.write(['PUT /early HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream', 'Content-Length: 1000',
    `Content-Digest: ${wrong}`, '', 'abc'].join('\r\n'))
  await closed
  t.equal(Buffer.concat(received).length, 0, 'nothing was claimed of content that never came')
})

t.test('commit() and digestVerdict() no longer truncate a reader still running', async (t) => {
  const dir = folder(t)
  const app = Fastify({ bodyLimit: 16 * 1024 * 1024 })
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
  app.put('/together/:name', async (request) => {
    const files = request.verifiedFiles()
    const [, verified] = await Promise.all([files.save(request.raw, join(dir, (request.params as { name: string }).name)), files.commit()])
    return { verified: verified.digest?.fields }
  })
  app.put('/verdict', async (request) => {
    const sink = counter()
    const [, verified] = await Promise.all([pipeline(request.raw, sink), request.digestVerdict()])
    return { bytes: sink.bytes, verified: verified?.fields }
  })
  app.put('/verdict-later', async (request) => {
    const sink = counter()
    const piped = pipeline(request.raw, sink)
    await new Promise((resolve) => request.raw.once('data', resolve))
    const verified = await request.digestVerdict()
    await piped
    return { bytes: sink.bytes, verified: verified?.fields }
  })
  const port = await listen(app)
  const content = seededBytes(4 * 1024 * 1024, fuzzSeed + 2)
  const put = async (path: string, digest = member('sha-256', content)): Promise<{ status: number, body: any }> => {
    const response = await request(`http://127.0.0.1:${port}${path}`, {
      method: 'PUT', body: content, headers: { 'content-type': 'application/octet-stream', 'content-digest': digest }
    })
    return { status: response.statusCode, body: await response.body.json() }
  }
  t.same(await put('/together/whole.bin'), { status: 200, body: { verified: ['content-digest'] } })
  t.ok(readFileSync(join(dir, 'whole.bin')).equals(content), 'the file committed holds every byte verified')
  t.equal((await put('/together/failed.bin', wrong)).status, 400)
  t.same(readdirSync(dir), ['whole.bin'], 'nothing of the failed one')
  t.same(await put('/verdict'), { status: 200, body: { bytes: content.length, verified: ['content-digest'] } })
  t.same(await put('/verdict-later'), { status: 200, body: { bytes: content.length, verified: ['content-digest'] } })
})

t.test('a handler that catches the problem from digestVerdict() and replies anyway sends the problem', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
  app.put('/', async (request) => ({ verified: await request.digestVerdict().then(() => true, () => false) }))
  const response = await app.inject({ method: 'PUT', url: '/', payload: 'content', headers: { 'content-type': 'application/octet-stream', 'content-digest': wrong } })
  t.equal(response.statusCode, 400)
  t.match(response.json(), { type: /digest-mismatching-value$/ })
})

t.test('commit() and digestVerdict() on a route with config.digest: false throw instead of committing unverified content', async (t) => {
  const dir = folder(t)
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
  app.put('/files', { config: { digest: false } }, async (request) => {
    const files = request.verifiedFiles()
    await files.save(request.raw, join(dir, 'unverified.bin'))
    return await files.commit()
  })
  app.put('/verdict', { config: { digest: false } }, async (request) => await request.digestVerdict())
  for (const url of ['/files', '/verdict']) {
    const response = await app.inject({ method: 'PUT', url, payload: 'content', headers: { 'content-type': 'application/octet-stream' } })
    t.equal(response.statusCode, 500, `${url}: the application's error`)
    t.equal(response.json().code, 'FST_DIGEST_FIELDS_UNVERIFIED_ROUTE')
  }
  t.same(readdirSync(dir), [], 'nothing committed')
})

t.test('HTTP/2: a stream left open while a reply waits is reset, where its unheard error took the process down', async (t) => {
  const escaped = watchProcess(t)
  const app = Fastify({ http2: true } as object) as unknown as FastifyInstance
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields, { stallTimeout: 100 })
  app.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
  app.get('/items/:id', async (request) => ({ id: (request.params as { id: string }).id }))
  app.put('/early', async () => 'ok')
  const port = await listen(app)
  const session = h2connect(`http://127.0.0.1:${port}`)
  t.teardown(() => session.destroy())
  session.on('error', () => {})
  for (const [headers, data] of [[{ ':method': 'GET', ':path': '/items/1' }, null], [{ ':method': 'PUT', ':path': '/early', 'content-type': 'application/octet-stream' }, 'x']] as const) {
    const stream = session.request(headers, { endStream: false })
    stream.on('error', () => {})
    if (data !== null) stream.write(data)
    let status: unknown = null
    stream.on('response', (response) => { status = response[':status'] })
    await new Promise((resolve) => stream.once('close', resolve))
    t.equal(stream.rstCode, h2constants.NGHTTP2_CANCEL, `${headers[':path']}: reset`)
    t.equal(status, null, 'nothing claimed of content that never came')
  }
  t.same(escaped, [], 'the process lives')
})

t.test('HTTP/2: file() then commit() with a later file nobody reads commits, where it answered a 500', async (t) => {
  const dir = folder(t)
  const app = Fastify({ http2: true } as object) as unknown as FastifyInstance
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields, { stallTimeout: 100 })
  await app.register(fastifyMultipart)
  app.post('/upload', async (request) => {
    const files = request.verifiedFiles()
    const data = await request.file()
    await files.save(data?.file as Readable, join(dir, 'first.bin'))
    return { verified: (await files.commit()).digest?.fields }
  })
  const port = await listen(app)
  const first = seededBytes(1000, fuzzSeed + 7)
  const body = form(part('a', first), part('b', seededBytes(300_000, fuzzSeed + 8)))
  const answer = await h2Request(port, { ':method': 'POST', ':path': '/upload', 'content-type': multipart, 'content-digest': member('sha-256', body) }, [body])
  t.equal(answer.status, 200)
  t.same(JSON.parse(answer.body), { verified: ['content-digest'] })
  t.ok(readFileSync(join(dir, 'first.bin')).equals(first), 'the first file, committed')
})

t.test('a client that stops sending while save() writes is disconnected and leaves no file, where the request waited for ever', async (t) => {
  const dir = folder(t)
  for (const http2 of [false, true]) {
    const app = Fastify({ http2 } as object) as unknown as FastifyInstance
    t.teardown(() => app.close())
    await app.register(fastifyDigestFields, { stallTimeout: 100 })
    app.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
    let handled: () => void = () => {}
    const done = new Promise<void>((resolve) => { handled = resolve })
    app.put('/files/:id', async (request, reply) => {
      try {
        const files = request.verifiedFiles()
        await files.save(request.raw, join(dir, (request.params as { id: string }).id))
        await files.commit()
        return reply.code(201).send()
      } finally {
        handled()
      }
    })
    const port = await listen(app)
    const headers = { 'content-type': 'application/octet-stream', 'content-length': '300000', 'content-digest': wrong }
    if (http2) {
      const session = h2connect(`http://127.0.0.1:${port}`)
      t.teardown(() => session.destroy())
      session.on('error', () => {})
      const stream = session.request({ ':method': 'PUT', ':path': '/files/h2', ...headers }, { endStream: false })
      stream.on('error', () => {})
      stream.write(Buffer.alloc(100_000))
      await new Promise((resolve) => stream.once('close', resolve))
      t.equal(stream.rstCode, h2constants.NGHTTP2_CANCEL, 'HTTP/2: the stream is reset')
    } else {
      const socket = connect({ host: '127.0.0.1', port })
      socket.on('error', () => {})
      socket.write(['PUT /files/h1 HTTP/1.1', 'Host: localhost', ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`), '', ''].join('\r\n'))
      socket.write(Buffer.alloc(100_000))
      await new Promise((resolve) => socket.once('close', resolve))
      t.pass('HTTP/1.1: the connection is closed')
    }
    // save() rejects once its file is removed.
    await done
    t.same(readdirSync(dir), [], 'no file, not even a temporary one')
  }
})

t.test('a reader an early reply let go gets an error, never a short body that ends as if complete', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
  let seen: Promise<{ bytes: number, error: string | null }> = Promise.resolve({ bytes: 0, error: null })
  app.put('/', async (request, reply) => {
    seen = (async () => {
      let bytes = 0
      try {
        for await (const chunk of request.raw) bytes += (chunk as Buffer).length
        return { bytes, error: null }
      } catch (error) {
        return { bytes, error: (error as { code: string }).code }
      }
    })()
    return reply.send('early')
  })
  const port = await listen(app)
  const content = seededBytes(200_000, fuzzSeed + 9)
  const response = await request(`http://127.0.0.1:${port}/`, { method: 'PUT', body: content, headers: { 'content-type': 'application/octet-stream', 'content-digest': member('sha-256', content) } })
  t.equal(response.statusCode, 200)
  await response.body.dump()
  const { bytes, error } = await seen
  t.ok(bytes === content.length || error === 'FST_DIGEST_FIELDS_CONTENT_TAKEN', `${bytes} bytes, ${String(error)}`)
})
