import { createHash } from 'node:crypto'
import { PassThrough, Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { createGunzip, gzipSync } from 'node:zlib'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { h2Request, listen, problemTypes, rawRequest, seededBytes, watchProcess, type RawResponse } from '../helpers.js'

// Every way an application reads request content, over HTTP/1.1 and HTTP/2: with the right digest
// it gets the content whole; with a wrong one it never sees the end (nor, for a reader that decides
// completeness itself, the handler), the client gets the 400 problem whether or not the reader
// listens for errors, and the process survives. Each of these crashed the process, answered 200 or
// hung before the plugin verified content at its source.

interface Seen { events: string[], content: Buffer[] }

function sink (seen: Seen): Writable {
  return new Writable({
    write (chunk: Buffer, _encoding, callback) { seen.content.push(Buffer.from(chunk)); callback() },
    final (callback) { seen.events.push('end'); callback() }
  })
}

type Setup = (app: FastifyInstance, seen: Seen) => void

const handOn = (app: FastifyInstance): void => {
  app.addContentTypeParser('application/octet-stream', (_request, payload, done) => done(null, payload))
}
const readNothing = (app: FastifyInstance): void => {
  app.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
}

const consumers: Record<string, Setup> = {
  // request.body.pipe(file): pipe() listens for no error on its source.
  'a handler that pipes the payload without error handling': (app, seen) => {
    handOn(app)
    app.put('/', (request, reply) => {
      const target = sink(seen)
      target.on('finish', () => reply.send({ ok: true }))
      ;(request.body as NodeJS.ReadableStream).pipe(target)
    })
  },
  'a handler with only data and end listeners on request.raw': (app, seen) => {
    readNothing(app)
    app.put('/', (request, reply) => {
      request.raw.on('data', (chunk: Buffer) => seen.content.push(Buffer.from(chunk)))
      request.raw.on('end', () => { seen.events.push('end'); reply.send({ ok: true }) })
    })
  },
  'a parser that pipes the payload into a PassThrough': (app, seen) => {
    app.addContentTypeParser('application/octet-stream', (_request, payload, done) => done(null, payload.pipe(new PassThrough())))
    app.put('/', async (request) => {
      for await (const chunk of request.body as AsyncIterable<Buffer>) seen.content.push(Buffer.from(chunk))
      seen.events.push('end')
      return { ok: true }
    })
  },
  'a parser that pipes the payload on a later tick': (app, seen) => {
    app.addContentTypeParser('application/octet-stream', (_request, payload, done) => {
      setImmediate(() => done(null, payload.pipe(new PassThrough())))
    })
    app.put('/', async (request) => {
      await pipeline(request.body as NodeJS.ReadableStream, sink(seen))
      return { ok: true }
    })
  },
  'a handler that streams request.raw to storage': (app, seen) => {
    readNothing(app)
    app.put('/', async (request) => {
      await pipeline(request.raw, sink(seen))
      return { ok: true }
    })
  },
  'a preHandler that reads request.raw on a route whose parser hands the payload on': (app, seen) => {
    handOn(app)
    app.put('/', {
      preHandler: async (request) => {
        for await (const chunk of request.raw) seen.content.push(Buffer.from(chunk as Buffer))
        seen.events.push('end')
      }
    }, async () => ({ ok: true }))
  },
  'a handler that iterates the payload': (app, seen) => {
    handOn(app)
    app.put('/', async (request) => {
      for await (const chunk of request.body as AsyncIterable<Buffer>) seen.content.push(Buffer.from(chunk))
      seen.events.push('end')
      return { ok: true }
    })
  },
  'a parser that sniffs the first chunk and calls done': (app, seen) => {
    app.addContentTypeParser('application/octet-stream', (_request, payload, done) => {
      payload.once('data', (chunk: Buffer) => {
        payload.pause()
        done(null, { magic: chunk.subarray(0, 4).toString('hex') })
      })
    })
    app.put('/', async (request) => {
      seen.events.push('end')
      return request.body
    })
  },
  "Fastify's own buffer parser": (app, seen) => {
    app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
    app.put('/', async (request) => {
      seen.content.push(request.body as Buffer)
      seen.events.push('end')
      return { ok: true }
    })
  },
  'an application preParsing hook that pipes the payload into zlib': (app, seen) => {
    app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
    const gunzip = async (_request: unknown, _reply: unknown, payload: NodeJS.ReadableStream): Promise<NodeJS.ReadableStream> => {
      // Fastify compares Content-Length with what the stream says it received, as for @fastify/compress.
      const decoded = Object.assign(createGunzip(), { receivedEncodedLength: 0 })
      payload.on('data', (chunk: Buffer) => { decoded.receivedEncodedLength += chunk.length })
      return payload.pipe(decoded)
    }
    app.put('/', { preParsing: gunzip }, async (request) => {
      seen.content.push(request.body as Buffer)
      seen.events.push('end')
      return { ok: true }
    })
  }
}

const sha256 = (data: Buffer): string => `sha-256=:${createHash('sha256').update(data).digest('base64')}:`

async function serve (setup: Setup, http2: boolean): Promise<{ port: number, seen: Seen }> {
  const app = Fastify({ http2: http2 as false })
  await app.register(fastifyDigestFields)
  const seen: Seen = { events: [], content: [] }
  setup(app, seen)
  const port = await listen(app)
  t.teardown(() => app.close())
  return { port, seen }
}

async function put (port: number, http2: boolean, content: Buffer, digest: string): Promise<RawResponse> {
  const chunks = [content.subarray(0, 1000), content.subarray(1000, 40_000), content.subarray(40_000)]
  const headers = { 'content-type': 'application/octet-stream', 'content-length': String(content.length), 'content-digest': digest }
  if (http2) return await h2Request(port, { ':method': 'PUT', ':path': '/', ...headers }, chunks)
  return await rawRequest(port, ['PUT / HTTP/1.1', 'Host: localhost', ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`)], chunks)
}

for (const http2 of [false, true]) {
  for (const [name, setup] of Object.entries(consumers)) {
    t.test(`${name} (${http2 ? 'HTTP/2' : 'HTTP/1.1'})`, async (t) => {
      const escaped = watchProcess(t)
      const { port, seen } = await serve(setup, http2)
      const original = seededBytes(100_000, name.length)
      const zipped = name.includes('zlib')
      const content = zipped ? gzipSync(original) : original

      const right = await put(port, http2, content, sha256(content))
      t.equal(right.status, 200, right.body)
      t.same(seen.events, ['end'])
      if (name.includes('sniffs')) {
        t.same(JSON.parse(right.body), { magic: original.subarray(0, 4).toString('hex') })
      } else {
        t.ok(Buffer.concat(seen.content).equals(original), 'the content arrived whole and unchanged')
      }

      seen.events.length = 0
      const tampered = Buffer.from(content)
      tampered.writeUInt8(tampered.readUInt8(tampered.length - 1) ^ 1, tampered.length - 1)
      const wrong = await put(port, http2, tampered, sha256(content))
      t.equal(wrong.status, 400, wrong.body)
      t.equal(wrong.headers['content-type'], 'application/problem+json')
      t.equal(JSON.parse(wrong.body).type, problemTypes + 'digest-mismatching-value')
      t.same(seen.events, [], 'no application code saw the end of content whose digest failed')
      t.same(escaped, [], 'nothing escaped to the process')
    })
  }
}
