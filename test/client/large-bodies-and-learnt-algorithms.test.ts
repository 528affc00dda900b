// Bodies past maxBufferedBody, which went out without a digest for a required route to refuse:
// `largeBody: 'refuse'` fails them before anything is sent, `'hash-first'` hashes a file stream
// from its file (and a Blob already read) and sends the digest with it. And an origin's preferred
// algorithm, learnt from its digest problem, is used at once for its next requests. The oracles
// are the plugin's verdict on a real socket, openssl over the file, and the server's count.
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { createReadStream, createWriteStream, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import t from 'tap'
import Fastify from 'fastify'
import { Agent, fetch as undiciFetch, request } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import { digestInterceptor, type DigestInterceptorOptions } from '../../lib/client.js'
import { PreferredAlgorithms } from '../../lib/client/preferred.js'
import { readContent } from '../../lib/client/request.js'
import { lookupAlgorithm } from '../../lib/fields/algorithms.js'
import { fuzzSeed, seededBytes, type Tap } from '../helpers.js'

t.comment(`seed ${fuzzSeed}`)

/** A server that requires a digest and says what it verified; `received` counts the requests that reached it. */
async function server (t: Tap, algorithms: Array<'sha-256' | 'sha-512'> = ['sha-256', 'sha-512']): Promise<{ origin: string, received: () => number }> {
  const app = Fastify({ bodyLimit: 16 * 1024 * 1024 })
  let received = 0
  app.addHook('onRequest', async () => { received++ })
  await app.register(fastifyDigestFields, { algorithms, required: true })
  app.addContentTypeParser('*', (_request, payload, done) => { payload.resume(); payload.on('end', () => done(null)) })
  app.post('/upload', async (request) => ({
    verified: Object.fromEntries(Object.entries(request.digest?.values ?? {}).map(([key, value]) => [key, value.toString('base64')]))
  }))
  const origin = await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  return { origin, received: () => received }
}

function client (t: Tap, options: DigestInterceptorOptions): Agent {
  const agent = new Agent().compose(digestInterceptor({ maxBufferedBody: 1024 * 1024, ...options })) as unknown as Agent
  t.teardown(() => agent.close())
  return agent
}

const folder = mkdtempSync(join(tmpdir(), 'large-bodies-'))
t.teardown(() => rmSync(folder, { recursive: true, force: true }))
const path = join(folder, 'large.bin')
const content = seededBytes(3 * 1024 * 1024 + 17, fuzzSeed)
writeFileSync(path, content)
const openssl = (range?: [number, number]): string => {
  const file = range === undefined ? path : join(folder, 'range.bin')
  if (range !== undefined) writeFileSync(file, content.subarray(range[0], range[1] + 1))
  return execFileSync('openssl', ['dgst', '-sha256', '-binary', file]).toString('base64')
}

t.test("largeBody: 'refuse' fails a large stream before anything is sent, and closes it", async (t) => {
  const { origin, received } = await server(t)
  const dispatcher = client(t, { largeBody: 'refuse' })
  const stream = createReadStream(path)
  await t.rejects(request(`${origin}/upload`, { method: 'POST', dispatcher, body: stream }), { code: 'FST_DIGEST_FIELDS_BODY_NOT_DIGESTED' })
  t.equal(received(), 0, 'nothing reached the server')
  t.ok(stream.destroyed, 'the stream read in part is closed')
  await t.rejects(request(`${origin}/upload`, { method: 'POST', dispatcher, body: new Blob([content]) as never }),
    { code: 'FST_DIGEST_FIELDS_BODY_NOT_DIGESTED' }, 'a large Blob too')
  t.equal(received(), 0)
  // A small one still goes, digested from memory.
  const small = await request(`${origin}/upload`, { method: 'POST', dispatcher, body: Readable.from([content.subarray(0, 1000)]) })
  t.equal(small.statusCode, 200)
  await small.body.dump()
})

t.test("largeBody: 'hash-first' hashes a file stream from its file, a Blob as read, and refuses any other large stream", async (t) => {
  const { origin, received } = await server(t)
  const dispatcher = client(t, { largeBody: 'hash-first' })
  const whole = await request(`${origin}/upload`, { method: 'POST', dispatcher, body: createReadStream(path) })
  t.equal(whole.statusCode, 200, 'the required route verified it')
  t.same(await whole.body.json(), { verified: { 'sha-256': openssl() } }, 'the digest of the file, as openssl has it')
  const range: [number, number] = [1000, 2_000_000]
  const part = await request(`${origin}/upload`, { method: 'POST', dispatcher, body: createReadStream(path, { start: range[0], end: range[1] }) })
  t.same(await part.body.json(), { verified: { 'sha-256': openssl(range) } }, 'of the range the stream reads')
  const blob = await request(`${origin}/upload`, { method: 'POST', dispatcher, body: new Blob([content]) as never })
  t.equal(blob.statusCode, 200)
  t.same(await blob.body.json(), { verified: { 'sha-256': openssl() } })
  t.equal(received(), 3)
  await t.rejects(request(`${origin}/upload`, { method: 'POST', dispatcher, body: Readable.from([content]) }),
    { code: 'FST_DIGEST_FIELDS_BODY_NOT_DIGESTED' }, 'a stream that cannot be read twice')
  t.equal(received(), 3)
})

t.test("largeBody: 'hash-first' hashes a file only when it reads the same twice, as the bytes the stream sends", async (t) => {
  // Found by the attack on the option: a pipe was read to hash it and sent empty, a stream decoded
  // to text was sent under the digest of the file's bytes, /proc and device files read otherwise
  // the second time, and /dev/zero was hashed for ever.
  const { origin } = await server(t)
  const dispatcher = client(t, { largeBody: 'hash-first' })
  const verified = async (body: unknown): Promise<{ status: number, verified: unknown }> => {
    const response = await request(`${origin}/upload`, { method: 'POST', dispatcher, body: body as never })
    return { status: response.statusCode, verified: (await response.body.json() as { verified?: unknown }).verified }
  }
  const small = content.subarray(0, 50_000)
  const fifo = join(folder, 'fifo')
  execFileSync('mkfifo', [fifo])
  const writer = createWriteStream(fifo)
  writer.end(small)
  t.same(await verified(createReadStream(fifo)), { status: 200, verified: { 'sha-256': createHash('sha256').update(small).digest('base64') } },
    'a pipe is read once, into memory, and sent with the digest of what it gave')
  const hex = await verified(createReadStream(path, { encoding: 'hex', end: 9999 }))
  t.same(hex, { status: 200, verified: { 'sha-256': createHash('sha256').update(content.subarray(0, 10_000).toString('hex')).digest('base64') } },
    'a stream decoded to text: the digest of the text it sends')
  const proc = await verified(createReadStream('/proc/self/status'))
  t.equal(proc.status, 200, 'a /proc file, whose size says nothing, is read once')
  await t.rejects(request(`${origin}/upload`, { method: 'POST', dispatcher, body: createReadStream('/dev/zero') }),
    { code: 'FST_DIGEST_FIELDS_BODY_NOT_DIGESTED' }, '/dev/zero is not hashed for ever: past the limit, it is refused')
})

t.test('fetch() with a body largeBody refuses rejects at once, where it never settled', async (t) => {
  const { origin, received } = await server(t)
  const dispatcher = client(t, { largeBody: 'refuse', maxBufferedBody: 4096 })
  for (const body of [Buffer.alloc(50_000, 1), 'x'.repeat(4097)]) {
    for (const fetcher of [fetch, undiciFetch]) {
      const error = await fetcher(`${origin}/upload`, { method: 'POST', body, dispatcher } as never).then(() => null, (error: Error) => error)
      t.match(error, { name: 'TypeError', cause: { code: 'FST_DIGEST_FIELDS_BODY_NOT_DIGESTED' } })
    }
  }
  t.equal(received(), 0, 'nothing was sent')
})

t.test("largeBody: 'send' (the default) sends it as before, without a digest, for a required route to refuse", async (t) => {
  const { origin } = await server(t)
  const dispatcher = client(t, {})
  const sent = await request(`${origin}/upload`, { method: 'POST', dispatcher, body: createReadStream(path) })
  t.equal(sent.statusCode, 400)
  t.match(await sent.body.json(), { detail: /requires a Content-Digest/ })
})

t.test("an origin's preferred algorithm, learnt from its problem, is used at once for its next requests", async (t) => {
  const { origin, received } = await server(t, ['sha-512'])
  const retries: string[] = []
  const dispatcher = client(t, { onRetry: ({ algorithm }) => { retries.push(String(algorithm)) } })
  for (let i = 0; i < 3; i++) {
    const response = await request(`${origin}/upload`, { method: 'POST', dispatcher, body: `request ${i}` })
    t.equal(response.statusCode, 200)
    t.same(Object.keys((await response.body.json() as { verified: object }).verified), ['sha-512'])
  }
  t.same(retries, ['sha-512'], 'one retry, for the first request')
  t.equal(received(), 4, 'three requests and one retry')
})

t.test('the preferences learnt are bounded: the least recently used origin goes first', async (t) => {
  const [sha256, sha512] = [lookupAlgorithm('sha-256'), lookupAlgorithm('sha-512')]
  const learnt = new PreferredAlgorithms(2)
  learnt.learn('a', sha512 as never)
  learnt.learn('b', sha512 as never)
  t.equal(learnt.of('a'), sha512, 'a, now the most recently used')
  learnt.learn('c', sha256 as never)
  t.same(['a', 'b', 'c'].map((origin) => learnt.of(origin)?.key), ['sha-512', undefined, 'sha-256'], 'b forgotten')
  learnt.learn('a', sha256 as never)
  t.equal(learnt.of('a'), sha256, 'a preference learnt again replaces the one before')
})

t.test('a FormData this undici cannot serialize (of another copy of undici) goes as it is, undigested', async (t) => {
  // Tagged FormData, but no FormData of this realm's or of the undici package's.
  const foreign = { [Symbol.toStringTag]: 'FormData' }
  const content = await readContent(foreign, 1024 * 1024, 'refuse', lookupAlgorithm('sha-256') as never, new AbortController().signal)
  t.same(content, { bytes: null, body: foreign })
  t.equal(content.body, foreign)
})
