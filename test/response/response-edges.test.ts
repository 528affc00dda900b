import { once } from 'node:events'
import { connect } from 'node:net'
import { Readable } from 'node:stream'
import t from 'tap'
import Fastify from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { base64Digest, hello, helloSha256, json, listen, watchProcess } from '../helpers.js'

// Issue 15, items 2 and 5: a streamed response to an HTTP/1.0 request went out chunked with a
// trailer section, which an HTTP/1.0 client reads as body bytes (RFC 9112 section 6.1 forbids
// it); and an onRequest hook before the plugin that answered a request whose Want-* field nothing
// had judged made the response-digest hook throw its parse error, a 500.

/** The raw bytes of a response to `head`, sent as written, until the server closes. */
async function exchange (port: number, head: string[]): Promise<string> {
  const socket = connect({ host: '127.0.0.1', port })
  await once(socket, 'connect')
  const received: Buffer[] = []
  socket.on('data', (data) => received.push(data))
  socket.write([...head, '', ''].join('\r\n'))
  await once(socket, 'close')
  return Buffer.concat(received).toString('latin1')
}

t.test('an HTTP/1.0 client gets a streamed response as without the plugin: no chunked framing, no trailer section', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields, { responseDigests: ['content-digest', 'repr-digest'] })
  const parts = ['hello ', 'from ', 'a stream']
  app.get('/stream', async (_request, reply) => reply.header('content-length', String(parts.join('').length)).send(Readable.from(parts.map((part) => Buffer.from(part)))))
  app.get('/unsized', async () => Readable.from(parts.map((part) => Buffer.from(part))))
  app.get('/buffer', async () => Buffer.from(hello))
  const port = await listen(app)
  t.teardown(() => app.close())

  for (const want of [[], ['Want-Content-Digest: sha-256=1']]) {
    const sized = await exchange(port, ['GET /stream HTTP/1.0', ...want])
    t.match(sized, /^HTTP\/1\.1 200 OK\r\n/)
    t.notMatch(sized, /transfer-encoding/i, 'no transfer coding to a client that has none')
    t.notMatch(sized, /\r\n(content|repr)-digest:/i, 'no digest it cannot be sent')
    t.match(sized, /\r\ncontent-length: 19\r\n/i, 'Content-Length is kept')
    t.ok(sized.endsWith('\r\n\r\nhello from a stream'), 'the body is the content exactly')
    const unsized = await exchange(port, ['GET /unsized HTTP/1.0', ...want])
    t.notMatch(unsized, /transfer-encoding/i)
    t.ok(unsized.endsWith('\r\n\r\nhello from a stream'), 'delimited by the close, as HTTP/1.0 does')
  }
  // What the bytes can be known of first still goes in the header section.
  const buffered = await exchange(port, ['GET /buffer HTTP/1.0'])
  t.match(buffered, new RegExp(`\\r\\ncontent-digest: sha-256=:${base64Digest('sha-256', hello).replaceAll('+', '\\+')}:\\r\\n`, 'i'))
  // HTTP/1.1 still gets its trailer section.
  const chunked = await exchange(port, ['GET /stream HTTP/1.1', 'Host: localhost', 'Connection: close'])
  t.match(chunked, /\r\ntransfer-encoding: chunked\r\n/i)
  t.match(chunked, /\r\ncontent-digest: sha-256=:[A-Za-z0-9+/=]+:\r\n/i)
})

t.test('a response to a request whose Want-* field nothing judged is never a 500', async (t) => {
  const escaped = watchProcess(t)
  const app = Fastify()
  // A cache or a health shortcut, registered before the plugin, answers before it sees the request.
  app.addHook('onRequest', async (request, reply) => {
    if (request.headers['x-shortcut'] !== undefined) return reply.send({ cached: true })
  })
  await app.register(fastifyDigestFields, { responseDigests: ['repr-digest'] })
  app.get('/', async () => ({ cached: false }))
  app.post('/', async () => ({ cached: false }))
  const unparsable = ['sha-256=1, ??', 'sha-256=:AAAA', '(', 'sha-256=1;', 'sha-256=1,']
  const unjudged = ['sha-256="1"', 'sha-256=1, sha-512=11', 'sha-256=-1', 'sha-256=1.5', 'md5=3']
  for (const value of [...unparsable, ...unjudged]) {
    for (const name of ['want-content-digest', 'want-repr-digest']) {
      const response = await app.inject({ method: 'GET', url: '/', headers: { 'x-shortcut': '1', [name]: value } })
      t.equal(response.statusCode, 200, `${name}: ${value}`)
      t.same(response.json(), { cached: true })
      t.match(response.headers.vary, name === 'want-content-digest' ? 'Want-Content-Digest' : 'Want-Repr-Digest')
      if (!unparsable.includes(value)) continue
      // A field that does not parse asks for nothing; the route's own digest is still sent.
      t.equal(response.headers['repr-digest'], `sha-256=:${base64Digest('sha-256', '{"cached":true}')}:`, `${name}: ${value}`)
      t.equal(response.headers['content-digest'], undefined)
    }
  }
  // The same fields, judged by the plugin, are refused as before.
  const judged = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': helloSha256, 'want-content-digest': 'sha-256=1, ??' } })
  t.equal(judged.statusCode, 400)
  t.same(escaped, [])
})
