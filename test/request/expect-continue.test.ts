import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { createHash } from 'node:crypto'
import { once } from 'node:events'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { request as httpRequest } from 'node:http'
import { connect as h2connect } from 'node:http2'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { listen, seededBytes, fuzzSeed, type Tap } from '../helpers.js'

// Issue 19, part 1: a request that expects 100-continue (RFC 9110 section 10.1.1) and whose fields
// the plugin refuses gets its final 400 instead of the 100, so the client never sends the content;
// one it accepts, or a route it does not cover, gets its 100 once the content is read. The oracles
// are the clients' own accounts: curl's count of bytes uploaded and the 100 it printed, Node's
// 'continue' events.

t.comment(`seed ${fuzzSeed}`)
const folder = mkdtempSync(join(tmpdir(), 'expect-continue-'))
t.teardown(() => rmSync(folder, { recursive: true, force: true }))
const content = seededBytes(2 * 1024 * 1024, fuzzSeed)
const upload = join(folder, 'upload.bin')
writeFileSync(upload, content)
const sha256 = `sha-256=:${createHash('sha256').update(content).digest('base64')}:`
const refusals: Record<string, Record<string, string>> = {
  'an unsupported algorithm': { 'content-digest': 'md5=:AAAAAAAAAAAAAAAAAAAAAA==:' },
  'an impossible value': { 'content-digest': 'sha-256=:AAAA:' },
  'no field on a required route': {}
}

async function server (t: Tap, http2 = false, scoped = false): Promise<{ app: FastifyInstance, port: number, reads: string[] }> {
  const app = Fastify({ http2 } as object) as unknown as FastifyInstance
  const reads: string[] = []
  const routes = async (scope: FastifyInstance): Promise<void> => {
    await scope.register(fastifyDigestFields, { required: true })
    scope.addContentTypeParser('application/octet-stream', (_request, payload, done) => done(null, payload))
    const read = async (request: { body: unknown, url: string }): Promise<number> => {
      reads.push(request.url)
      let bytes = 0
      for await (const chunk of request.body as AsyncIterable<Buffer>) bytes += chunk.length
      return bytes
    }
    scope.put('/upload', async (request) => ({ bytes: await read(request), fields: request.digest?.fields ?? null }))
    scope.put('/uncovered', { config: { digest: false } }, async (request) => ({ bytes: await read(request) }))
    scope.put('/unread', { config: { digest: false } }, async () => ({ read: false }))
  }
  if (scoped) await app.register(routes)
  else await routes(app)
  t.teardown(() => app.close())
  return { app, port: await listen(app), reads }
}

interface CurlResult { status: number, uploaded: number, continued: boolean, body: string }

/** curl with Expect: 100-continue waiting up to 60 s for the 100: the bytes it sent, and whether it saw a 100. */
async function curl (port: number, path: string, headers: Record<string, string>, http2 = false): Promise<CurlResult> {
  // Not spawnSync: the server answering it runs in this process.
  const result = await promisify(execFile)('curl', [
    '-sv', http2 ? '--http2-prior-knowledge' : '--http1.1', '-X', 'PUT', '--data-binary', `@${upload}`, '--expect100-timeout', '60',
    '-H', 'content-type: application/octet-stream', '-H', 'expect: 100-continue',
    ...Object.entries(headers).flatMap(([name, value]) => ['-H', `${name}: ${value}`]),
    '-w', '\n%{http_code} %{size_upload}', `http://127.0.0.1:${port}${path}`
  ], { encoding: 'utf8', timeout: 120_000 })
  const lines = result.stdout.trimEnd().split('\n')
  const [status, uploaded] = (lines.pop() as string).split(' ').map(Number)
  return { status: status as number, uploaded: uploaded as number, continued: /^< HTTP\/[12](\.1)? 100/m.test(result.stderr), body: lines.join('\n') }
}

t.test('curl: a refused request gets its 400 without a 100 and sends no content', async (t) => {
  const { port, reads } = await server(t)
  for (const [name, headers] of Object.entries(refusals)) {
    const result = await curl(port, '/upload', headers)
    t.equal(result.status, 400, name)
    t.notOk(result.continued, `${name}: no 100`)
    t.equal(result.uploaded, 0, `${name}: curl sent none of the content`)
    t.match(JSON.parse(result.body), { type: String, title: String })
  }
  t.same(reads, [], 'no handler read anything')
})

t.test('curl: an accepted request, and a route the plugin does not cover, get their 100 and are read', async (t) => {
  const { port } = await server(t)
  const accepted = await curl(port, '/upload', { 'content-digest': sha256 })
  t.same({ ...accepted, body: JSON.parse(accepted.body) }, { status: 200, uploaded: content.length, continued: true, body: { bytes: content.length, fields: ['content-digest'] } })
  const uncovered = await curl(port, '/uncovered', {})
  t.same({ ...uncovered, body: JSON.parse(uncovered.body) }, { status: 200, uploaded: content.length, continued: true, body: { bytes: content.length } })
  const mismatch = await curl(port, '/upload', { 'content-digest': `sha-256=:${createHash('sha256').update('other').digest('base64')}:` })
  t.equal(mismatch.status, 400, 'a value that can only be compared with the content is checked once it came')
  t.ok(mismatch.continued)
  t.equal(mismatch.uploaded, content.length)
})

t.test('a route that never reads the content answers without a 100, and the request does not hang', async (t) => {
  const { port } = await server(t)
  const result = await curl(port, '/unread', {})
  t.equal(result.status, 200)
  t.notOk(result.continued)
  t.equal(result.uploaded, 0)
})

t.test('HTTP/2, curl: a request gets its 100 at once, as without the plugin, and is read', async (t) => {
  // Refusals are checked with Node's client below: curl 7.88 takes any early final response over
  // HTTP/2, which ends with RST_STREAM(NO_ERROR), for an empty reply in about a third of runs.
  const { port, reads } = await server(t, true)
  const accepted = await curl(port, '/upload', { 'content-digest': sha256 }, true)
  t.same([accepted.status, accepted.continued, accepted.uploaded], [200, true, content.length])
  t.same(reads, ['/upload'])
})

t.test('registered in a child scope only, the plugin still defers the 100', async (t) => {
  const { port } = await server(t, false, true)
  const refused = await curl(port, '/upload', refusals['an unsupported algorithm'] as Record<string, string>)
  t.same([refused.status, refused.continued, refused.uploaded], [400, false, 0])
  const accepted = await curl(port, '/upload', { 'content-digest': sha256 })
  t.same([accepted.status, accepted.continued, accepted.uploaded], [200, true, content.length])
})

t.test('Node clients: http.request sees a refusal instead of a continue, and continues when accepted; http2 continues at once', async (t) => {
  const { port } = await server(t)
  for (const [digest, expected] of [['md5=:AAAAAAAAAAAAAAAAAAAAAA==:', { status: 400, continued: false }], [sha256, { status: 200, continued: true }]] as const) {
    const request = httpRequest({ port, host: '127.0.0.1', method: 'PUT', path: '/upload', headers: { expect: '100-continue', 'content-type': 'application/octet-stream', 'content-length': content.length, 'content-digest': digest } })
    let continued = false
    request.on('continue', () => { continued = true; request.end(content) })
    const [response] = await once(request, 'response')
    response.resume()
    await once(response, 'end')
    if (!continued) request.destroy()
    t.same({ status: response.statusCode, continued }, expected, `http: ${digest.slice(0, 7)}`)
  }
  const h2 = await server(t, true)
  const session = h2connect(`http://127.0.0.1:${h2.port}`)
  t.teardown(() => session.close())
  for (const [digest, status] of [['md5=:AAAAAAAAAAAAAAAAAAAAAA==:', 400], [sha256, 200]] as const) {
    const stream = session.request({ ':method': 'PUT', ':path': '/upload', expect: '100-continue', 'content-type': 'application/octet-stream', 'content-digest': digest }, { endStream: false })
    let continued = false
    stream.on('continue', () => { continued = true; stream.end(content) })
    const [headers] = await once(stream, 'response')
    stream.resume()
    await once(stream, 'close')
    t.same({ status: headers[':status'], continued }, { status, continued: true }, `http2: ${digest.slice(0, 7)}, a 100 at once`)
  }
})

t.test('an application that listens for checkContinue itself keeps it', async (t) => {
  const app = Fastify({ bodyLimit: 4 * content.length })
  let calls = 0
  app.server.on('checkContinue', (request, response) => {
    calls++
    response.writeContinue()
    app.server.emit('request', request, response)
  })
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
  app.put('/', async () => 'ok')
  t.teardown(() => app.close())
  const result = await curl(await listen(app), '/', { 'content-digest': sha256 })
  t.same([result.status, result.continued, calls], [200, true, 1])
})

t.test('an application that starts listening for checkContinue after the plugin answers alone', async (t) => {
  const app = Fastify({ bodyLimit: 4 * content.length })
  await app.register(fastifyDigestFields)
  let calls = 0
  app.server.on('checkContinue', (request, response) => {
    calls++
    response.writeContinue()
    app.server.emit('request', request, response)
  })
  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
  app.put('/', async (request) => ({ bytes: (request.body as Buffer).length }))
  t.teardown(() => app.close())
  const result = await curl(await listen(app), '/', { 'content-digest': sha256 })
  t.same([result.status, result.continued, calls, JSON.parse(result.body)], [200, true, 1, { bytes: content.length }])
})
