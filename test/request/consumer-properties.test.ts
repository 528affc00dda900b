import { createHash } from 'node:crypto'
import { Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import t from 'tap'
import fc from 'fast-check'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { abortUpload, fuzzScale, fuzzSeed, h2Request, listen, problemTypes, rawRequest, watchProcess, type RawResponse } from '../helpers.js'

// Random readers, random content, random chunking, random bodyLimits, right and wrong digests and
// clients that give up at random points, over HTTP/1.1 and HTTP/2. The process must survive, and
// every answered request must get exactly what a small model of the outcome says; no reader may
// see the end of content whose digest failed.

t.comment(`seed ${fuzzSeed} (DIGEST_FUZZ_SEED replays it)`)

const readers = ['buffer parser', 'pipe without error handling', 'pipeline of request.raw', 'data and end listeners', 'for await over the payload', 'parser that sniffs'] as const
type Reader = typeof readers[number]

/** What the application saw of each request, by its x-case header. */
const ends = new Set<string>()

function route (app: FastifyInstance, reader: Reader): void {
  const path = '/' + reader.replaceAll(' ', '-')
  const seen = (request: FastifyRequest): void => { ends.add(request.headers['x-case'] as string) }
  const discard = (): Writable => new Writable({ write (_chunk, _encoding, callback) { callback() } })
  app.register(async (scope) => {
    scope.removeAllContentTypeParsers()
    switch (reader) {
      case 'buffer parser':
        scope.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
        scope.put(path, async (request) => { seen(request); return { length: (request.body as Buffer).length } })
        break
      case 'pipe without error handling':
        scope.addContentTypeParser('*', (_request, payload, done) => done(null, payload))
        scope.put(path, (request, reply) => {
          let length = 0
          const target = new Writable({ write (chunk: Buffer, _encoding, callback) { length += chunk.length; callback() } })
          target.on('finish', () => { seen(request); reply.send({ length }) })
          ;(request.body as NodeJS.ReadableStream).pipe(target)
        })
        break
      case 'pipeline of request.raw':
        scope.addContentTypeParser('*', (_request, _payload, done) => done(null))
        scope.put(path, async (request) => {
          let length = 0
          request.raw.on('data', (chunk: Buffer) => { length += chunk.length })
          await pipeline(request.raw, discard())
          seen(request)
          return { length }
        })
        break
      case 'data and end listeners':
        scope.addContentTypeParser('*', (_request, _payload, done) => done(null))
        scope.put(path, (request, reply) => {
          let length = 0
          request.raw.on('data', (chunk: Buffer) => { length += chunk.length })
          request.raw.on('end', () => { seen(request); reply.send({ length }) })
        })
        break
      case 'for await over the payload':
        scope.addContentTypeParser('*', (_request, payload, done) => done(null, payload))
        scope.put(path, async (request) => {
          let length = 0
          for await (const chunk of request.body as AsyncIterable<Buffer>) length += chunk.length
          seen(request)
          return { length }
        })
        break
      case 'parser that sniffs':
        scope.addContentTypeParser('*', (_request, payload, done) => {
          payload.once('data', (chunk: Buffer) => { payload.pause(); done(null, chunk[0]) })
        })
        scope.put(path, async (request) => { seen(request); return { first: request.body } })
        break
    }
  })
}

const apps = new Map<string, number>()
async function server (http2: boolean, bodyLimit: number): Promise<number> {
  const key = `${http2} ${bodyLimit}`
  const known = apps.get(key)
  if (known !== undefined) return known
  const app = Fastify({ http2: http2 as false, bodyLimit })
  await app.register(fastifyDigestFields)
  for (const reader of readers) route(app, reader)
  const port = await listen(app)
  t.teardown(() => app.close())
  apps.set(key, port)
  return port
}

interface Case {
  http2: boolean
  reader: Reader
  content: Uint8Array
  chunk: number
  wrong: boolean
  abortAt: number | null
  bodyLimit: number
}

/** The model: what the client must get, or null when it gave up before the end. */
function expected (c: Case): { status: number, type?: string, body?: unknown } | null {
  if (c.abortAt !== null) return null
  if (c.reader === 'buffer parser' && c.content.length > c.bodyLimit) return { status: 413 }
  if (c.wrong) return { status: 400, type: problemTypes + 'digest-mismatching-value' }
  if (c.reader === 'parser that sniffs') return { status: 200, body: { first: c.content[0] } }
  return { status: 200, body: { length: c.content.length } }
}

let id = 0
async function send (port: number, c: Case, name: string): Promise<RawResponse | null> {
  const content = Buffer.from(c.content)
  const digested = c.wrong ? Buffer.concat([content, Buffer.from('!')]) : content
  const headers = {
    'content-type': 'application/octet-stream',
    'content-length': String(content.length),
    'content-digest': `sha-512=:${createHash('sha512').update(digested).digest('base64')}:`,
    'x-case': name
  }
  const path = '/' + c.reader.replaceAll(' ', '-')
  const chunks: Buffer[] = []
  for (let at = 0; at < content.length; at += c.chunk) chunks.push(content.subarray(at, at + c.chunk))
  if (c.abortAt === null) {
    if (c.http2) return await h2Request(port, { ':method': 'PUT', ':path': path, ...headers }, chunks)
    return await rawRequest(port, [`PUT ${path} HTTP/1.1`, 'Host: localhost', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)], chunks)
  }
  const sent = content.subarray(0, c.abortAt)
  await abortUpload(port, c.http2, path, headers, sent)
  return null
}

const cases: fc.Arbitrary<Case> = fc.record({
  http2: fc.boolean(),
  reader: fc.constantFrom(...readers),
  // Large contents as a length, so that a counterexample prints short.
  content: fc.oneof(
    { weight: 2, arbitrary: fc.uint8Array({ minLength: 1, maxLength: 2048 }) },
    { weight: 1, arbitrary: fc.integer({ min: 2049, max: 300_000 }) }
  ),
  chunk: fc.integer({ min: 1, max: 70_000 }),
  wrong: fc.boolean(),
  abort: fc.oneof({ weight: 4, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: fc.double({ min: 0, max: 0.99, noNaN: true }) }),
  bodyLimit: fc.constantFrom(1024, 64 * 1024, 1024 * 1024)
}).map(({ abort, content: given, ...c }) => ({
  ...c,
  content: typeof given === 'number' ? new Uint8Array(given).fill(given % 251) : given,
  // At most about 300 writes a request.
  chunk: Math.max(c.chunk, Math.ceil((typeof given === 'number' ? given : given.length) / 300)),
  abortAt: abort === null ? null : Math.floor(abort * (typeof given === 'number' ? given : given.length))
}))

t.test('every reader, chunking, bodyLimit and abort point gets the modelled outcome, and the process survives', async (t) => {
  const escaped = watchProcess(t)
  const outcomes = new Map<string, number>()
  await fc.assert(fc.asyncProperty(cases, async (c) => {
    const port = await server(c.http2, c.bodyLimit)
    const name = String(++id)
    const response = await send(port, c, name)
    const model = expected(c)
    const outcome = model === null ? 'aborted' : String(model.status)
    outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1)
    if (model === null) return
    // A server that refuses an upload early (413) closes while the client still sends: TCP may then
    // reset the connection before the client reads the answer.
    if (model.status === 413 && Number.isNaN(response?.status)) return
    if (response === null || response.status !== model.status) throw new Error(`status ${response?.status}, expected ${model.status}: ${response?.body}`)
    const body = JSON.parse(response.body)
    if (model.type !== undefined && body.type !== model.type) throw new Error(`type ${body.type}`)
    if (model.body !== undefined && JSON.stringify(body) !== JSON.stringify(model.body)) throw new Error(`body ${response.body}`)
    if (model.status !== 200 && ends.has(name)) throw new Error('the application saw the end of refused content')
  }), { numRuns: Math.round(300 * fuzzScale), seed: fuzzSeed })
  // Every server still answers, with nothing escaped to the process.
  for (const port of apps.values()) {
    const http2 = [...apps.entries()].find(([, p]) => p === port)?.[0].startsWith('true') === true
    const content = Buffer.from('still here')
    const digest = `sha-512=:${createHash('sha512').update(content).digest('base64')}:`
    const headers = { 'content-type': 'application/octet-stream', 'content-length': String(content.length), 'content-digest': digest }
    const response = http2
      ? await h2Request(port, { ':method': 'PUT', ':path': '/buffer-parser', ...headers }, [content])
      : await rawRequest(port, ['PUT /buffer-parser HTTP/1.1', 'Host: localhost', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)], [content])
    t.equal(response.status, 200)
  }
  t.same(escaped, [], 'nothing escaped to the process')
  t.comment(`outcomes: ${JSON.stringify(Object.fromEntries(outcomes))}`)
  for (const outcome of ['200', '400', '413', 'aborted']) t.ok((outcomes.get(outcome) ?? 0) > 0, `reached ${outcome}`)
})
