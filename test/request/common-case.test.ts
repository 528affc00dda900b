import { createHash } from 'node:crypto'
import { Readable } from 'node:stream'
import t from 'tap'
import fc from 'fast-check'
import Fastify, { type FastifyInstance, type FastifyPluginAsync, type FastifyRequest } from 'fastify'
import { CommonCaseVerifier, commonCase } from '../../lib/request/common-case.js'
import { describeDigest, fuzzScale, fuzzSeed, listen, rawRequest, seededBytes } from '../helpers.js'

// Issue 29: the common case, verified without judging every field (lib/request/common-case.ts),
// must be the general path's double: for the same request, the same answer, the same bytes and end
// to every reader, and the same request.digest, over random content, chunkings, readers and right
// or wrong digests, with inject() and over real sockets. The general path is the plugin with the
// common case never found.

t.comment(`seed ${fuzzSeed} (DIGEST_FUZZ_SEED replays it)`)

const taken = new Set<string>()
type Plugin = { default: FastifyPluginAsync }
const withCommonCase = await t.mockImport<Plugin>('../../lib/index.js', {
  '../../lib/request/common-case.js': {
    CommonCaseVerifier,
    commonCase: (...args: Parameters<typeof commonCase>) => {
      const found = commonCase(...args)
      if (found !== null) taken.add(args[0].headers['x-case'] as string)
      return found
    }
  }
})
const generalOnly = await t.mockImport<Plugin>('../../lib/index.js', {
  '../../lib/request/common-case.js': { CommonCaseVerifier, commonCase: () => null }
})

const readers = ['buffer parser', 'stream handed on', 'request.raw listeners', 'parser that sniffs', 'reply before reading'] as const
type Reader = typeof readers[number]

/** What each application saw of each request, by its x-case header. */
interface Seen { bytes: string, ended: boolean, digest: unknown }
const seen = new Map<string, Seen>()

function observe (request: FastifyRequest, chunks: Buffer[], ended: boolean): void {
  const bytes = createHash('sha256').update(Buffer.concat(chunks)).digest('hex')
  seen.set(request.headers['x-case'] as string, { bytes, ended, digest: describeDigest(request.digest) })
}

async function app (plugin: FastifyPluginAsync): Promise<FastifyInstance> {
  const app = Fastify({ bodyLimit: 1024 * 1024 })
  await app.register(plugin)
  for (const reader of readers) {
    app.register(async (scope) => {
      scope.removeAllContentTypeParsers()
      const path = '/' + reader.replaceAll(' ', '-').replace('.', '-')
      switch (reader) {
        case 'buffer parser':
          scope.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
          scope.put(path, async (request) => { observe(request, [request.body as Buffer], true); return { ok: true } })
          break
        case 'stream handed on':
          scope.addContentTypeParser('*', (_request, payload, done) => done(null, payload))
          scope.put(path, async (request) => {
            const chunks: Buffer[] = []
            try {
              for await (const chunk of request.body as AsyncIterable<Buffer>) chunks.push(chunk)
            } catch (error) {
              observe(request, chunks, false)
              throw error
            }
            observe(request, chunks, true)
            return { ok: true }
          })
          break
        case 'request.raw listeners':
          scope.addContentTypeParser('*', (_request, _payload, done) => done(null))
          scope.put(path, (request, reply) => {
            const chunks: Buffer[] = []
            request.raw.on('data', (chunk: Buffer) => chunks.push(chunk))
            request.raw.on('end', () => { observe(request, chunks, true); reply.send({ ok: true }) })
            request.raw.on('error', (error) => { observe(request, chunks, false); reply.send(error) })
          })
          break
        case 'parser that sniffs':
          scope.addContentTypeParser('*', (_request, payload, done) => {
            payload.once('data', (chunk: Buffer) => { payload.pause(); done(null, chunk.subarray(0, 1)) })
          })
          scope.put(path, async (request) => { observe(request, [request.body as Buffer], false); return { ok: true } })
          break
        case 'reply before reading':
          scope.addContentTypeParser('*', (_request, _payload, done) => done(null))
          scope.put(path, async (request) => { observe(request, [], false); return { ok: true } })
          break
      }
    })
  }
  t.teardown(() => app.close())
  return app
}

const fast = await app(withCommonCase.default)
const general = await app(generalOnly.default)
const ports = { fast: await listen(fast), general: await listen(general) }

interface Case {
  socket: boolean
  reader: Reader
  // The content as its size and seed, so that a counterexample prints short.
  size: number
  seed: number
  chunk: number
  field: 'content-digest' | 'repr-digest'
  algorithm: 'sha-256' | 'sha-512'
  digest: 'right' | 'wrong' | 'truncated' | 'two members'
  // A Content-Range of part of a larger representation, whose Repr-Digest is then not compared.
  range: boolean
  type: string
}

function fieldOf (c: Case, content: Buffer): string {
  const name = c.algorithm === 'sha-256' ? 'sha256' : 'sha512'
  const right = createHash(name).update(content).digest()
  switch (c.digest) {
    case 'right': return `${c.algorithm}=:${right.toString('base64')}:`
    case 'wrong': return `${c.algorithm}=:${createHash(name).update(content).update('!').digest('base64')}:`
    case 'truncated': return `${c.algorithm}=:${right.subarray(1).toString('base64')}:`
    // Another member, of an algorithm the route does not support: the general path alone.
    case 'two members': return `${c.algorithm}=:${right.toString('base64')}:, adler=:AAAAAA==:`
  }
}

interface Outcome { status: number, body: unknown, seen: Seen | null }

async function send (port: number, app: FastifyInstance, c: Case, name: string): Promise<Outcome> {
  const content = seededBytes(c.size, c.seed)
  const headers = {
    'content-type': c.type,
    'content-length': String(c.size),
    [c.field]: fieldOf(c, content),
    ...c.range ? { 'content-range': `bytes 0-${c.size - 1}/${2 * c.size}` } : {},
    'x-case': name
  }
  const path = '/' + c.reader.replaceAll(' ', '-').replace('.', '-')
  const chunks: Buffer[] = []
  for (let at = 0; at < c.size; at += c.chunk) chunks.push(content.subarray(at, at + c.chunk))
  const { status, body } = c.socket
    ? await rawRequest(port, [`PUT ${path} HTTP/1.1`, 'Host: localhost', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)], chunks)
    : await app.inject({ method: 'PUT', url: path, headers, payload: Readable.from(chunks) }).then((r) => ({ status: r.statusCode, body: r.body }))
  return { status, body: Number.isNaN(status) ? null : JSON.parse(body), seen: seen.get(name) ?? null }
}

const cases: fc.Arbitrary<Case> = fc.record({
  socket: fc.boolean(),
  reader: fc.constantFrom(...readers),
  size: fc.oneof({ weight: 3, arbitrary: fc.integer({ min: 1, max: 3000 }) }, { weight: 1, arbitrary: fc.integer({ min: 3001, max: 200_000 }) }),
  seed: fc.integer({ min: 1, max: 2 ** 31 - 1 }),
  chunk: fc.integer({ min: 1, max: 70_000 }),
  field: fc.constantFrom('content-digest' as const, 'repr-digest' as const),
  algorithm: fc.constantFrom('sha-256' as const, 'sha-512' as const),
  range: fc.boolean(),
  digest: fc.constantFrom('right' as const, 'right' as const, 'wrong' as const, 'truncated' as const, 'two members' as const),
  type: fc.constantFrom('application/octet-stream', 'application/json', 'text/plain; charset=utf-8')
}).map((c) => ({ ...c, chunk: Math.max(c.chunk, Math.ceil(c.size / 200)) }))

t.test('the common case answers, delivers and records what the general path does', async (t) => {
  let id = 0
  const outcomes = new Map<string, number>()
  await fc.assert(fc.asyncProperty(cases, async (c) => {
    const name = String(++id)
    const [one, other] = [await send(ports.fast, fast, c, `${name}a`), await send(ports.general, general, c, `${name}b`)]
    // A field refused before the content is answered at once, and the connection closed while the
    // client still sends: TCP may reset it before the client reads the answer.
    if (c.digest === 'truncated' && (Number.isNaN(one.status) || Number.isNaN(other.status))) return
    if (JSON.stringify(one) !== JSON.stringify(other)) {
      throw new Error(`the common case gave ${JSON.stringify(one)}, the general path ${JSON.stringify(other)}`)
    }
    // Every request of the common case took it, and no other did.
    const common = (c.digest === 'right' || c.digest === 'wrong') && !(c.field === 'repr-digest' && c.range)
    if (taken.has(`${name}a`) !== common) throw new Error(`the common case was ${common ? 'not ' : ''}taken`)
    if (taken.has(`${name}b`)) throw new Error('the general path took the common case')
    const outcome = `${c.field} ${c.digest}${c.range ? ' range' : ''} ${one.status}`
    outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1)
  }), { numRuns: Math.round(300 * fuzzScale), seed: fuzzSeed })
  t.comment(`outcomes: ${JSON.stringify(Object.fromEntries(outcomes))}`)
  for (const field of ['content-digest', 'repr-digest']) {
    for (const outcome of ['right 200', 'wrong 400', 'truncated 400', 'two members 200']) t.ok((outcomes.get(`${field} ${outcome}`) ?? 0) > 0, `reached ${field} ${outcome}`)
  }
  t.ok((outcomes.get('repr-digest wrong range 200') ?? 0) > 0, 'a Repr-Digest of a part is not compared')
})

t.test('what the common case leaves to the general path', async (t) => {
  const content = Buffer.from('{"hello": "world"}')
  const field = `sha-256=:${createHash('sha256').update(content).digest('base64')}:`
  const others: Array<[string, Record<string, string | undefined>]> = [
    ['two digest fields', { 'repr-digest': field }],
    ['a Repr-Digest of a part', { 'content-digest': undefined, 'repr-digest': field, 'content-range': 'bytes 0-17/40' }],
    ['a preference field', { 'want-content-digest': 'sha-256=1' }],
    ['a Trailer field', { trailer: 'content-digest' }],
    ['multipart content', { 'content-type': 'multipart/form-data; boundary=x' }],
    ['a Content-Length with a leading 0', { 'content-length': '018' }],
    ['a value not in canonical base64', { 'content-digest': field.replace(/=:$/, ':') }]
  ]
  for (const [what, extra] of others) {
    taken.clear()
    const headers = Object.fromEntries(Object.entries({ 'content-type': 'application/json', 'content-digest': field, 'x-case': what, ...extra })
      .filter((entry): entry is [string, string] => entry[1] !== undefined))
    await fast.inject({ method: 'PUT', url: '/buffer-parser', headers, payload: content })
    t.notOk(taken.has(what), what)
  }
  // HTTP/2 and chunked content go the general way too: it alone reads a trailer section.
  taken.clear()
  await fast.inject({ method: 'PUT', url: '/buffer-parser', headers: { 'content-type': 'application/json', 'content-digest': field, 'x-case': 'chunked', 'transfer-encoding': 'chunked' }, payload: Readable.from([content]) })
  t.notOk(taken.has('chunked'), 'chunked content')
})
