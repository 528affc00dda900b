// The plugin's waits for the content end when its client leaves, and hold a reply on a route the
// plugin does not verify only until the end shows no trailer field.
import { once } from 'node:events'
import { connect as h2connect } from 'node:http2'
import { connect } from 'node:net'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { request } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import { Readable } from 'node:stream'
import { listen, member, watchProcess, type Tap } from '../helpers.js'

async function app (t: Tap, http2: boolean): Promise<{ port: number, verdicts: Array<Promise<unknown>> }> {
  const server = Fastify({ http2 } as object) as unknown as FastifyInstance
  t.teardown(() => server.close())
  await server.register(fastifyDigestFields)
  server.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
  const verdicts: Array<Promise<unknown>> = []
  server.put('/verdict', async (request) => {
    const verdict = request.digestVerdict()
    verdicts.push(verdict.then(() => 'resolved', (error: Error & { code?: string }) => error.code ?? error.message))
    return await verdict
  })
  server.put('/off', { config: { digest: false } }, async (_request, reply) => reply.code(201).send('stored'))
  return { port: await listen(server), verdicts }
}

const head = (): string[] => ['PUT /verdict HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream',
  'Content-Length: 100000', `Content-Digest: ${member('sha-256', 'x')}`, '', '']

t.test('HTTP/1.1: a client that leaves while digestVerdict() waits rejects it with the abort', async (t) => {
  const escaped = watchProcess(t)
  const { port, verdicts } = await app(t, false)
  const socket = connect({ host: '127.0.0.1', port })
  socket.on('error', () => {})
  await once(socket, 'connect')
  socket.write(head().join('\r\n') + 'abc')
  while (verdicts.length === 0) await new Promise((resolve) => setImmediate(resolve))
  socket.destroy()
  t.equal(await verdicts[0], 'ECONNRESET')
  t.same(escaped, [])
})

t.test('HTTP/2: a client that leaves while digestVerdict() waits rejects it with the abort', async (t) => {
  const escaped = watchProcess(t)
  const { port, verdicts } = await app(t, true)
  const session = h2connect(`http://127.0.0.1:${port}`)
  t.teardown(() => session.destroy())
  session.on('error', () => {})
  const stream = session.request({ ':method': 'PUT', ':path': '/verdict', 'content-type': 'application/octet-stream', 'content-digest': member('sha-256', 'x') })
  stream.on('error', () => {})
  stream.write('abc')
  while (verdicts.length === 0) await new Promise((resolve) => setImmediate(resolve))
  // Without ending its side first, which close() would do.
  session.destroy()
  t.equal(await verdicts[0], 'ECONNRESET')
  t.same(escaped, [])
})

t.test('a chunked request to a route with config.digest: false is answered without the plugin holding the reply', async (t) => {
  const { port } = await app(t, false)
  const response = await request(`http://127.0.0.1:${port}/off`, {
    method: 'PUT', headers: { 'content-type': 'application/octet-stream' }, body: Readable.from([Buffer.from('a'), Buffer.from('b')])
  })
  t.equal(response.statusCode, 201)
  t.equal(await response.body.text(), 'stored')
})

t.test('commit() rejects with the error of a save still writing that failed, though the content verified', async (t) => {
  const server = Fastify()
  t.teardown(() => server.close())
  await server.register(fastifyDigestFields)
  server.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
  server.put('/', async (request) => {
    const files = request.verifiedFiles()
    const [saved, committed] = await Promise.allSettled([files.save(request.raw, '/nonexistent/folder/file'), files.commit()])
    return { saved: saved.status, committed: committed.status === 'rejected' ? (committed.reason as { code: string }).code : 'fulfilled' }
  })
  const response = await server.inject({ method: 'PUT', url: '/', payload: 'x', headers: { 'content-type': 'application/octet-stream', 'content-digest': member('sha-256', 'x') } })
  t.same(response.json(), { saved: 'rejected', committed: 'ENOENT' })
})
