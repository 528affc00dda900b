import { connect } from 'node:http2'
import t from 'tap'
import Fastify from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { hello, helloSha256, member, problemTypes } from '../helpers.js'

// HTTP/2 frames content in DATA frames, so a request can carry it without Content-Length.
async function post (port: number, headers: Record<string, string>, body: string | null): Promise<{ status: number, body: string }> {
  const session = connect(`http://127.0.0.1:${port}`)
  try {
    const type = body === null ? {} : { 'content-type': 'application/json' }
    const stream = session.request({ ':method': 'POST', ':path': '/', ...type, ...headers }, { endStream: body === null })
    if (body !== null) {
      stream.write(body.slice(0, 5))
      stream.end(body.slice(5))
    }
    let text = ''
    stream.setEncoding('utf8')
    stream.on('data', (chunk: string) => { text += chunk })
    const [status] = await Promise.all([
      new Promise<number>((resolve) => stream.once('response', (h) => resolve(Number(h[':status'])))),
      new Promise((resolve) => stream.once('end', resolve))
    ])
    return { status, body: text }
  } finally {
    session.close()
  }
}

t.test('verifies requests over HTTP/2, where content needs no Content-Length', async (t) => {
  const app = Fastify({ http2: true })
  await app.register(fastifyDigestFields)
  let handled = 0
  app.post('/', async (request) => { handled++; return request.body })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const port = (app.server.address() as import('node:net').AddressInfo).port

  t.equal((await post(port, { 'content-digest': helloSha256 }, hello)).status, 200)
  t.equal((await post(port, { 'content-digest': helloSha256, 'content-length': String(hello.length) }, hello)).status, 200)
  const mismatch = await post(port, { 'content-digest': member('sha-256', 'x') }, hello)
  t.equal(mismatch.status, 400)
  t.equal(JSON.parse(mismatch.body).type, problemTypes + 'digest-mismatching-value')
  // No DATA frames at all: the digest of empty content.
  t.equal((await post(port, { 'content-digest': member('sha-256', '') }, null)).status, 200)
  t.equal((await post(port, { 'content-digest': helloSha256 }, null)).status, 400)
  t.equal(handled, 3)
})
