import { createHash, type Hash } from 'node:crypto'
import { Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import * as zlib from 'node:zlib'
import t from 'tap'
import fc from 'fast-check'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { abortUpload, fuzzScale, fuzzSeed, h2Request, listen, problemTypes, randomChunks, rawRequest, seededBytes, seededRandom, watchProcess, type RawResponse } from '../helpers.js'

// Unencoded-Digest over layered content codings (gzip, deflate, br, one to three of them), as the
// plugin decodes on the side while the request streams: random content, some of it compressible and
// some of it a compressed bomb, random compression levels, bytes after the end of the coded stream,
// a stream cut short, right and wrong digests, random chunking and clients that give up, over
// HTTP/1.1 and HTTP/2, read by readers that change the chunks they are given in place. The process
// must survive, every answered request must get exactly what a small model of the outcome says, and
// no reader may see the end of content that was refused.

t.comment(`seed ${fuzzSeed} (DIGEST_FUZZ_SEED replays it)`)
// Heavier than most files: more than the runner's 30 s default on a loaded 2-core machine.
t.setTimeout(120_000)

const readers = ['copy then zero', 'rewrite in place', 'buffer parser', 'for await over the payload', 'pipeline of request.raw'] as const
type Reader = typeof readers[number]

const codingNames = ['gzip', 'deflate', 'br'] as const
type Coding = typeof codingNames[number]

/** What the application saw of each request, by its x-case header. */
const ends = new Set<string>()

/** What a route answers: the length and SHA-256 of the bytes its reader got, and what was verified. */
function answer (request: FastifyRequest, length: number, hash: Hash): unknown {
  return { length, sha256: hash.digest('hex'), fields: request.digest?.fields }
}

function route (app: FastifyInstance, reader: Reader): void {
  const path = '/' + reader.replaceAll(' ', '-')
  const seen = (request: FastifyRequest): void => { ends.add(request.headers['x-case'] as string) }
  const hashing = (hash: Hash, counted: { length: number }): Writable => new Writable({
    write (chunk: Buffer, _encoding, callback) { hash.update(chunk); counted.length += chunk.length; callback() }
  })
  app.register(async (scope) => {
    scope.removeAllContentTypeParsers()
    switch (reader) {
      case 'copy then zero':
        // Copies each chunk, then wipes the one it was given; nobody listens for 'error', so the
        // plugin answers a failure itself.
        scope.addContentTypeParser('*', (_request, _payload, done) => done(null))
        scope.put(path, (request, reply) => {
          const copies: Buffer[] = []
          request.raw.on('data', (chunk: Buffer) => { copies.push(Buffer.from(chunk)); chunk.fill(0) })
          request.raw.on('end', () => {
            seen(request)
            const received = Buffer.concat(copies)
            reply.send(answer(request, received.length, createHash('sha256').update(received)))
          })
        })
        break
      case 'rewrite in place':
        // A parser that hashes each chunk, then overwrites it with other bytes.
        scope.addContentTypeParser('*', (request, payload, done) => {
          const hash = createHash('sha256')
          let length = 0
          payload.on('data', (chunk: Buffer) => {
            hash.update(chunk)
            length += chunk.length
            for (let i = 0; i < chunk.length; i++) chunk[i] = (chunk[i] as number) ^ 0xff
          })
          payload.on('end', () => { seen(request); done(null, { length, hash }) })
          payload.on('error', (error: Error) => done(error))
        })
        scope.put(path, async (request) => {
          const { length, hash } = request.body as { length: number, hash: Hash }
          return answer(request, length, hash)
        })
        break
      case 'buffer parser':
        scope.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
        scope.put(path, async (request) => {
          seen(request)
          const body = request.body as Buffer
          return answer(request, body.length, createHash('sha256').update(body))
        })
        break
      case 'for await over the payload':
        scope.addContentTypeParser('*', (_request, payload, done) => done(null, payload))
        scope.put(path, async (request) => {
          const hash = createHash('sha256')
          let length = 0
          for await (const chunk of request.body as AsyncIterable<Buffer>) {
            hash.update(chunk)
            length += chunk.length
          }
          seen(request)
          return answer(request, length, hash)
        })
        break
      case 'pipeline of request.raw':
        scope.addContentTypeParser('*', (_request, _payload, done) => done(null))
        scope.put(path, async (request) => {
          const hash = createHash('sha256')
          const counted = { length: 0 }
          await pipeline(request.raw, hashing(hash, counted))
          seen(request)
          return answer(request, counted.length, hash)
        })
        break
    }
  })
}

const MiB = 1024 * 1024
// Large enough for every content generated, and small enough for the bombs to pass.
const bodyLimits = [16 * MiB, MiB] as const

const apps = new Map<string, { port: number, http2: boolean }>()
async function server (http2: boolean, bodyLimit: number): Promise<number> {
  const key = `${http2} ${bodyLimit}`
  const known = apps.get(key)
  if (known !== undefined) return known.port
  const app = Fastify({ http2: http2 as false, bodyLimit })
  await app.register(fastifyDigestFields)
  for (const reader of readers) route(app, reader)
  const port = await listen(app)
  t.teardown(() => app.close())
  apps.set(key, { port, http2 })
  return port
}

/** Content as bytes, or (for large content, so that a counterexample prints short) as a recipe. */
type Content = Uint8Array | { kind: 'random' | 'words', size: number, seed: number } | { kind: 'zeros', size: number }

type Damage = { kind: 'none' } | { kind: 'trailing', bytes: Uint8Array } | { kind: 'truncated', cut: number }

interface Case {
  http2: boolean
  reader: Reader
  content: Content
  /** In the order applied: the last is the outermost, the first the decoder removes. */
  codings: Array<{ coding: Coding, level: number }>
  damage: Damage
  wrong: boolean
  chunking: { max: number, seed: number }
  /** Where in the bytes sent the client gives up, as a fraction; null when it sends them all. */
  abort: number | null
  bodyLimit: number
}

const vocabulary = ['digest', 'field', 'content', 'coding', 'the', 'of', 'a', 'unencoded', 'gzip', 'stream', '\n', '{"key": ', '0123456789', 'end']

function materialize (content: Content): Buffer {
  if (content instanceof Uint8Array) return Buffer.from(content)
  if (content.kind === 'zeros') return Buffer.alloc(content.size)
  if (content.kind === 'random') return seededBytes(content.size, content.seed)
  const random = seededRandom(content.seed)
  const words: string[] = []
  for (let size = 0; size < content.size;) {
    const word = vocabulary[Math.floor(random() * vocabulary.length)] as string
    words.push(word)
    size += word.length + 1
  }
  return Buffer.from(words.join(' ')).subarray(0, content.size)
}

function encode (data: Buffer, coding: Coding, level: number): Buffer {
  switch (coding) {
    case 'gzip': return zlib.gzipSync(data, { level })
    case 'deflate': return zlib.deflateSync(data, { level })
    case 'br': return zlib.brotliCompressSync(data, { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: level } })
  }
}

interface Prepared {
  content: Buffer
  /** content, then content with each coding applied in turn: what each decoding stage outputs, and what is sent. */
  layers: Buffer[]
  /** The fully coded content, damaged as the case says: the bytes sent. */
  sent: Buffer
  /** The damage done to the bytes sent. */
  damage: Damage
}

function prepare (c: Case): Prepared {
  const content = materialize(c.content)
  const layers = [content]
  for (const { coding, level } of c.codings) layers.push(encode(layers.at(-1) as Buffer, coding, level))
  const coded = layers.at(-1) as Buffer
  // A cut never empties the content (empty content has no coding to remove): br codes empty
  // content in one byte, which is then sent whole.
  const cut = c.damage.kind === 'truncated' ? Math.min(c.damage.cut, coded.length - 1) : 0
  const damage: Damage = cut === 0 && c.damage.kind === 'truncated' ? { kind: 'none' } : c.damage
  const sent = damage.kind === 'trailing' ? Buffer.concat([coded, damage.bytes]) : coded.subarray(0, coded.length - cut)
  return { content, layers, sent, damage }
}

function sha256 (data: Buffer, encoding: 'hex' | 'base64'): string {
  return createHash('sha256').update(data).digest(encoding)
}

interface Outcome {
  /** Names the outcome class, to show that every class was reached. */
  label: string
  status: number
  type?: string
  detail?: RegExp
  body?: { length: number, sha256: string, fields: string[] }
  /** Fastify refuses before reading: the client may get a reset instead of the answer. */
  early?: boolean
}

/**
 * The model: every outcome the client may get (more than one where two checks race), or null when
 * it gave up before the end.
 */
function expected (c: Case, { layers, sent, damage }: Prepared): Outcome[] | null {
  if (c.abort !== null) return null
  const outermost = (c.codings.at(-1) as { coding: Coding }).coding
  // Fastify's own check, on the Content-Length of the bytes sent, before the plugin sees an end.
  if (c.reader === 'buffer parser' && sent.length > c.bodyLimit) return [{ label: '413 from Fastify', status: 413, early: true }]
  const undecodable: Outcome = { label: 'does not decode', status: 400, type: 'about:blank', detail: /^Unencoded-Digest cannot be verified: the content does not decode: / }
  // Node's gunzip takes bytes after the end of a member for the start of another, unless the first is 0.
  const decodeError = damage.kind === 'truncated' || (damage.kind === 'trailing' && outermost === 'gzip' && damage.bytes[0] !== 0)
  // Every decoding stage is bounded: what any of them outputs (each layer but the bytes sent).
  if (Math.max(...layers.slice(0, -1).map((layer) => layer.length)) > c.bodyLimit) {
    const tooLarge: Outcome = { label: '413', status: 413, type: 'about:blank', detail: new RegExp(`^Unencoded-Digest cannot be verified: the content decodes to more than ${c.bodyLimit} bytes$`) }
    // Bytes after the end are met only once the one stage has passed the limit; but a cut can take
    // away what codes the bomb (a br bomb is a few bytes), and an outer stage can fail on the damage
    // before an inner one passes the limit.
    return damage.kind === 'truncated' || (decodeError && c.codings.length > 1) ? [tooLarge, undecodable] : [tooLarge]
  }
  if (decodeError) return [undecodable]
  if (damage.kind === 'trailing') {
    const after: Outcome = { label: 'bytes after the end', status: 400, type: 'about:blank', detail: new RegExp(`^Unencoded-Digest cannot be verified: the content has bytes after the end of its ${outermost} coding$`) }
    // A leading 0 is padding to gunzip, which then looks no further in that write; bytes in a later
    // write are taken for another member.
    return outermost === 'gzip' ? [after, undecodable] : [after]
  }
  if (c.wrong) return [{ label: 'mismatch', status: 400, type: problemTypes + 'digest-mismatching-value' }]
  return [{ label: '200', status: 200, body: { length: sent.length, sha256: sha256(sent, 'hex'), fields: ['content-digest', 'unencoded-digest'] } }]
}

/** Why a response is not the outcome, or null when it is. */
function mismatch (response: RawResponse, outcome: Outcome): string | null {
  if (response.status !== outcome.status) return `status ${response.status}`
  let body: { type?: unknown, detail?: unknown, length?: unknown, sha256?: unknown, fields?: unknown }
  try {
    body = JSON.parse(response.body)
  } catch {
    return 'a body that is not JSON'
  }
  if (outcome.type !== undefined && body.type !== outcome.type) return `type ${body.type}`
  if (outcome.detail !== undefined && !(typeof body.detail === 'string' && outcome.detail.test(body.detail))) return `detail ${body.detail}`
  if (outcome.body !== undefined) {
    if (body.length !== outcome.body.length) return `length ${body.length}, sent ${outcome.body.length}`
    if (body.sha256 !== outcome.body.sha256) return 'the reader got other bytes than were sent'
    const fields = Array.isArray(body.fields) ? [...body.fields].sort() : body.fields
    if (JSON.stringify(fields) !== JSON.stringify(outcome.body.fields)) return `fields ${JSON.stringify(body.fields)}`
  }
  return null
}

let id = 0
async function send (port: number, c: Case, { content, sent }: Prepared, name: string): Promise<RawResponse | null> {
  const other = Buffer.concat([content, Buffer.from('!')])
  const headers = {
    'content-type': 'application/octet-stream',
    'content-length': String(sent.length),
    'content-encoding': c.codings.map(({ coding }) => coding).join(', '),
    'unencoded-digest': `sha-256=:${sha256(c.wrong ? other : content, 'base64')}:`,
    // Always right: the bytes sent are checked too.
    'content-digest': `sha-256=:${sha256(sent, 'base64')}:`,
    'x-case': name
  }
  const path = '/' + c.reader.replaceAll(' ', '-')
  // At most about 300 writes a request.
  const chunks = randomChunks(sent, Math.max(c.chunking.max, Math.ceil(sent.length / 150)), seededRandom(c.chunking.seed))
  if (c.abort === null) {
    if (c.http2) return await h2Request(port, { ':method': 'PUT', ':path': path, ...headers }, chunks)
    return await rawRequest(port, [`PUT ${path} HTTP/1.1`, 'Host: localhost', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)], chunks)
  }
  const partial = sent.subarray(0, Math.floor(c.abort * sent.length))
  await abortUpload(port, c.http2, path, headers, partial)
  return null
}

const contents: fc.Arbitrary<Content> = fc.oneof(
  { weight: 3, arbitrary: fc.uint8Array({ maxLength: 2048 }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('random' as const), size: fc.integer({ min: 2049, max: 200_000 }), seed: fc.integer() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('words' as const), size: fc.integer({ min: 2049, max: 200_000 }), seed: fc.integer() }) },
  // Bombs: sizes a clear margin (64 KiB) either side of the small bodyLimit, so that where decoding
  // passes it does not depend on how the output is cut.
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('zeros' as const),
      size: fc.oneof(fc.integer({ min: 256 * 1024, max: MiB - 64 * 1024 }), fc.integer({ min: MiB + 64 * 1024, max: 2 * MiB }))
    })
  }
)

const damages: fc.Arbitrary<Damage> = fc.oneof(
  { weight: 4, arbitrary: fc.constant({ kind: 'none' as const }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('trailing' as const), bytes: fc.uint8Array({ minLength: 1, maxLength: 100 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('truncated' as const), cut: fc.integer({ min: 1, max: 8 }) }) }
)

const cases: fc.Arbitrary<Case> = fc.record({
  http2: fc.boolean(),
  reader: fc.constantFrom(...readers),
  content: contents,
  codings: fc.array(fc.record({ coding: fc.constantFrom(...codingNames), level: fc.integer({ min: 0, max: 9 }) }), { minLength: 1, maxLength: 3 }),
  damage: damages,
  wrong: fc.boolean(),
  chunking: fc.record({ max: fc.integer({ min: 1, max: 70_000 }), seed: fc.integer() }),
  abort: fc.oneof({ weight: 3, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: fc.double({ min: 0, max: 0.99, noNaN: true }) }),
  bodyLimit: fc.constantFrom(...bodyLimits)
})

t.test('layered codings, damaged streams, bombs, in-place readers and aborts get the modelled outcome, and the process survives', async (t) => {
  const escaped = watchProcess(t)
  const outcomes = new Map<string, number>()
  const refused: string[] = []
  const aborted: string[] = []
  await fc.assert(fc.asyncProperty(cases, async (c) => {
    const port = await server(c.http2, c.bodyLimit)
    const name = String(++id)
    const prepared = prepare(c)
    const response = await send(port, c, prepared, name)
    const model = expected(c, prepared)
    if (model === null) {
      aborted.push(name)
      outcomes.set('aborted', (outcomes.get('aborted') ?? 0) + 1)
      return
    }
    // A server that refuses an upload early (413) closes while the client still sends: TCP may then
    // reset the connection before the client reads the answer.
    const early = model.find((outcome) => outcome.early === true)
    if (early !== undefined && Number.isNaN(response?.status)) {
      outcomes.set(early.label, (outcomes.get(early.label) ?? 0) + 1)
      return
    }
    if (response === null) throw new Error('no response')
    const reasons = model.map((outcome) => mismatch(response, outcome))
    const matched = model[reasons.indexOf(null)]
    if (matched === undefined) {
      throw new Error(`expected ${model.map((o) => `${o.label} (${o.status})`).join(' or ')}, got ${reasons.join('; ')}: ${response.body.slice(0, 300)}`)
    }
    outcomes.set(matched.label, (outcomes.get(matched.label) ?? 0) + 1)
    if (matched.status !== 200) {
      refused.push(name)
      if (ends.has(name)) throw new Error('the application saw the end of refused content')
    }
  }), { numRuns: Math.round(600 * fuzzScale), seed: fuzzSeed })
  // Every server still answers, with nothing escaped to the process.
  const content = Buffer.from('still here')
  const coded = zlib.gzipSync(zlib.brotliCompressSync(content))
  for (const { port, http2 } of apps.values()) {
    const headers = {
      'content-type': 'application/octet-stream',
      'content-length': String(coded.length),
      'content-encoding': 'br, gzip',
      'unencoded-digest': `sha-256=:${sha256(content, 'base64')}:`,
      'content-digest': `sha-256=:${sha256(coded, 'base64')}:`
    }
    const response = http2
      ? await h2Request(port, { ':method': 'PUT', ':path': '/buffer-parser', ...headers }, [coded])
      : await rawRequest(port, ['PUT /buffer-parser HTTP/1.1', 'Host: localhost', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)], [coded])
    t.equal(response.status, 200, `the ${http2 ? 'HTTP/2' : 'HTTP/1.1'} server still answers`)
  }
  t.same(escaped, [], 'nothing escaped to the process')
  // Checked again at the end, in case an end came after the answer.
  t.same(refused.filter((name) => ends.has(name)), [], 'no application saw the end of refused content')
  t.same(aborted.filter((name) => ends.has(name)), [], 'no application saw the end of content its client gave up on')
  t.comment(`outcomes: ${JSON.stringify(Object.fromEntries(outcomes))}`)
  for (const outcome of ['200', 'mismatch', 'bytes after the end', 'does not decode', '413', 'aborted']) t.ok((outcomes.get(outcome) ?? 0) > 0, `reached ${outcome}`)
})
