// Issue 18: the interceptor against a model, over HTTP/1.1 and HTTP/2 (TLS, as undici speaks it):
// random bodies in random chunks, with a digest in the header or the trailer section, of a random
// algorithm, and one byte changed at a random place or none. The model: the consumer gets the
// whole body and its end exactly when no byte was changed, and DigestMismatchError otherwise.
// undici 7 drops the trailer section of HTTP/2 responses (it completes on the stream's 'end'), so
// over HTTP/2 every digest is in the header section.
import { execFile } from 'node:child_process'
import { createHash } from 'node:crypto'
import { readFile, mkdtemp, rm } from 'node:fs/promises'
import { createSecureServer, type Http2ServerRequest, type Http2ServerResponse } from 'node:http2'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { Agent, request } from 'undici'
import { digestInterceptor, DigestMismatchError } from '../../lib/client.js'
import { fuzzScale, fuzzSeed, randomChunks, seededBytes, seededRandom, serving } from '../helpers.js'

t.comment(`seed ${fuzzSeed} (DIGEST_FUZZ_SEED replays it)`)

interface Case { body: Buffer, chunks: Buffer[], key: 'sha-256' | 'sha-512', trailer: boolean, flip: number | null }

const random = seededRandom(fuzzSeed)
const cases: Case[] = Array.from({ length: Math.round(60 * fuzzScale) }, (_, i) => {
  const body = seededBytes(Math.floor(random() ** 2 * 300_000), fuzzSeed + i)
  const sent = Buffer.from(body)
  const flip = random() < 0.5 && body.length > 0 ? Math.floor(random() * body.length) : null
  if (flip !== null) sent[flip] = (sent[flip] as number) ^ (1 + Math.floor(random() * 255))
  return { body, chunks: randomChunks(sent, 1 + Math.floor(random() * 70_000), random), key: random() < 0.5 ? 'sha-256' : 'sha-512', trailer: random() < 0.5, flip }
})

function answer (request: IncomingMessage | Http2ServerRequest, response: ServerResponse | Http2ServerResponse): void {
  const one = cases[Number(request.url?.slice(1))] as Case
  const trailer = one.trailer && request.httpVersion === '1.1'
  const value = `${one.key}=:${createHash(one.key.replace('-', '')).update(one.body).digest('base64')}:`
  if (trailer) {
    response.writeHead(200, { trailer: 'content-digest' })
  } else {
    response.writeHead(200, { 'content-digest': value })
  }
  let i = 0
  const next = (): void => {
    const chunk = one.chunks[i++]
    if (chunk !== undefined) {
      (response as ServerResponse).write(chunk, next)
      return
    }
    if (trailer) (response as ServerResponse).addTrailers({ 'content-digest': value })
    response.end()
  }
  next()
}

async function verdicts (origin: string, agent: Agent, trailers: boolean): Promise<void> {
  const dispatcher = agent.compose(digestInterceptor())
  let mismatches = 0
  for (const [i, one] of cases.entries()) {
    const where = one.trailer && trailers ? ' in the trailer section' : ''
    const response = await request(`${origin}/${i}`, { dispatcher })
    const result = await response.body.arrayBuffer().then((bytes) => Buffer.from(bytes), (error: unknown) => error)
    if (one.flip === null) {
      t.ok(Buffer.isBuffer(result) && result.equals(one.body), `${i}: ${one.body.length} bytes intact, ${one.key}${where}`)
    } else {
      mismatches++
      t.ok(result instanceof DigestMismatchError, `${i}: byte ${one.flip} of ${one.body.length} changed, ${one.key}${where}`)
    }
  }
  t.ok(mismatches > 0 && mismatches < cases.length, `${mismatches} of ${cases.length} changed`)
}

t.test('HTTP/1.1: the verdict is the model\'s for every body, chunking, algorithm and change', async (t) => {
  const origin = await serving(t, createServer(answer))
  const agent = new Agent()
  t.teardown(() => agent.close())
  await verdicts(origin, agent, true)
})

t.test('HTTP/2: the same, with every digest in the header section', async (t) => {
  const folder = await mkdtemp(join(tmpdir(), 'digest-tls-'))
  t.teardown(() => rm(folder, { recursive: true, force: true }))
  await promisify(execFile)('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-subj', '/CN=localhost', '-days', '1', '-keyout', join(folder, 'key.pem'), '-out', join(folder, 'cert.pem')])
  const server = createSecureServer({ key: await readFile(join(folder, 'key.pem')), cert: await readFile(join(folder, 'cert.pem')) }, answer)
  const origin = await serving(t, server, 'https')
  let http2 = 0
  server.on('stream', () => { http2++ })
  const agent = new Agent({ allowH2: true, connect: { rejectUnauthorized: false } })
  t.teardown(() => agent.close())
  await verdicts(origin, agent, false)
  t.equal(http2, cases.length, 'every request went over HTTP/2')
})
