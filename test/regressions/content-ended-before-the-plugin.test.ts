// Found by the third README-only attack of the declared-length hold-back: content whose end arrived
// while an asynchronous hook before the plugin's waited. A chunked request without fields was
// watched for an end that had come already, so its reply was held for ever (or the safe-commit
// recipe answered 500), and an unannounced Content-Digest in its trailer section reached the
// handler's reader with the end; a whole body that failed its digest was answered 400 but left in
// the stream, where a reader attached before the plugin's hook read it to its end; and a stream
// given an encoding before the plugin's hook buffered decoded text, which was hashed for the bytes.
import t from 'tap'
import type { Readable } from 'node:stream'
import Fastify from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { listen, member, rawRequest, whenPushed, type Tap } from '../helpers.js'

const content = Buffer.from('transfer 1000000 to mallory')
const wrong = `sha-256=:${Buffer.alloc(32).toString('base64')}:`

/**
 * A server whose first hook, before the plugin's, waits until the request's end is buffered, having
 * done `before` to its stream; the handler reads the content and says how that ended.
 */
async function server (t: Tap, before: (raw: Readable, seen: string[]) => void = () => {}): Promise<{ port: number, seen: string[] }> {
  const app = Fastify()
  t.teardown(() => app.close())
  const seen: string[] = []
  app.addHook('onRequest', async (request) => {
    before(request.raw, seen)
    await whenPushed(request.raw, (_bytes, ended) => ended)
  })
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/octet-stream', (_request, _payload, done) => { done(null) })
  app.post('/', async (request) => {
    try {
      let read = ''
      for await (const chunk of request.raw) read += String(chunk)
      seen.push(`handler read ${read.length} bytes to the end`)
    } catch (error) {
      seen.push(`handler got ${(error as Error).name}`)
      throw error
    }
    return 'taken'
  })
  return { port: await listen(app), seen }
}

const head = (fields: string[]): string[] => ['POST / HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream', ...fields]
const chunked = (trailer: string): Buffer => Buffer.from(`${content.length.toString(16)}\r\n${content.toString()}\r\n0\r\n${trailer}\r\n`)

t.test('a chunked request without fields is answered, and one with an unannounced trailer field refused', async (t) => {
  const { port, seen } = await server(t)
  const plain = await rawRequest(port, head(['Transfer-Encoding: chunked']), [chunked('')])
  t.equal(plain.status, 200, 'no field anywhere: answered')
  t.same(seen, [`handler read ${content.length} bytes to the end`])
  const unannounced = await rawRequest(port, head(['Transfer-Encoding: chunked']), [chunked(`Content-Digest: ${wrong}\r\n`)])
  t.equal(unannounced.status, 400)
  t.match(JSON.parse(unannounced.body).detail, /announce them in a Trailer/)
  t.equal(seen[1], 'handler got DigestProblem', 'the handler\'s reader got the problem, not the end')
})

t.test('a whole body that fails its digest fails its stream, for a reader attached before the plugin\'s hook', async (t) => {
  const { port, seen } = await server(t, (raw, seen) => {
    raw.on('data', () => {})
    raw.on('end', () => seen.push('the early reader saw the end'))
    raw.on('error', (error) => seen.push(`the early reader got ${error.name}`))
    // Reading only once the plugin's hook ran: a reader before it is refused.
    raw.pause()
  })
  const response = await rawRequest(port, head([`Content-Length: ${content.length}`, `Content-Digest: ${wrong}`]), [content])
  t.equal(response.status, 400)
  t.same(seen, ['the early reader got DigestProblem'])
  const right = await rawRequest(port, head([`Content-Length: ${content.length}`, `Content-Digest: ${member('sha-256', content)}`]), [content])
  t.equal(right.status, 200, 'the right digest passes')
})

t.test('content buffered as text (setEncoding()) before the plugin\'s hook is refused as read before it', async (t) => {
  const { port } = await server(t, (raw) => { raw.setEncoding('latin1') })
  for (const digest of [member('sha-256', content), member('sha-256', Buffer.from(content.toString('latin1')))]) {
    const response = await rawRequest(port, head([`Content-Length: ${content.length}`, `Content-Digest: ${digest}`]), [content])
    t.equal(response.status, 400)
    t.match(JSON.parse(response.body).detail, /read before the plugin could hash it/)
  }
})
