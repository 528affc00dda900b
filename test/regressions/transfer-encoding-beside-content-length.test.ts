// Found by the README-only attack of the declared-length hold-back: with `insecureHTTPParser`, Node
// takes a request with both Transfer-Encoding and Content-Length, and frames it by the chunked coding
// (RFC 9112 section 6.3: Transfer-Encoding overrides Content-Length). The plugin trusted the
// Content-Length: with 10000 declared and 5000 sent, its reader had all 5000 bytes of content whose
// digest failed before the verdict; with 0 declared, the content was taken as empty and verified
// before it came. Content-Length beside Transfer-Encoding now counts for nothing.
import t from 'tap'
import Fastify from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { fuzzSeed, listen, member, problemTypes, rawRequest, seededBytes } from '../helpers.js'

t.comment(`seed ${fuzzSeed}`)
const body = seededBytes(5000, fuzzSeed)
const wrong = `sha-256=:${Buffer.alloc(32).toString('base64')}:`

interface Read { bytes: number, ended: boolean, error: string | null }

t.test('with insecureHTTPParser, a Content-Length beside Transfer-Encoding frames nothing', async (t) => {
  const app = Fastify({ http: { insecureHTTPParser: true } } as object)
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/x-none', (_request, _payload, done) => { done(null) })
  const reads: Read[] = []
  app.post('/', async (request) => {
    const read: Read = { bytes: 0, ended: false, error: null }
    reads.push(read)
    try {
      for await (const chunk of request.raw) read.bytes += (chunk as Buffer).length
      read.ended = true
    } catch (error) {
      read.error = (error as Error).name
    }
    return read
  })
  const port = await listen(app)
  const send = async (length: number, digest: string) => await rawRequest(port, [
    'POST / HTTP/1.1', 'Host: localhost', 'Content-Type: application/x-none', `Content-Length: ${length}`,
    'Transfer-Encoding: chunked', `Content-Digest: ${digest}`
  ], [Buffer.concat([Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from('\r\n')]), Buffer.from('0\r\n\r\n')])

  for (const length of [10_000, 0]) {
    const response = await send(length, wrong)
    t.equal(response.status, 400, `Content-Length ${length}, a wrong digest: refused`)
    t.equal(JSON.parse(response.body).type, problemTypes + 'digest-mismatching-value')
    const read = reads.at(-1) as Read
    t.notOk(read.ended, 'the reader never saw the end')
    t.ok(read.bytes <= body.length - 1024, `it had ${read.bytes} bytes, the last kilobyte received held`)
    t.equal(read.error, 'DigestProblem', 'and got the problem')
  }
  const response = await send(0, member('sha-256', body))
  t.equal(response.status, 200, 'the right digest of the bytes sent passes')
  t.same(JSON.parse(response.body), { bytes: body.length, ended: true, error: null })
})
