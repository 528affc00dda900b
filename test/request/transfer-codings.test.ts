import { gzipSync } from 'node:zlib'
import t from 'tap'
import { buildApp, hello, helloSha256, listen, rawRequest } from '../helpers.js'

// Issue 15: `Transfer-Encoding: gzip, chunked` was refused as a digest mismatch, because Node
// removes only chunked and leaves gzip on the bytes, while digests are of the content with every
// transfer coding removed (RFC 9530 section 2). It is now refused as unverifiable, and says why.

function chunked (data: Buffer): Buffer {
  return Buffer.concat([Buffer.from(`${data.length.toString(16)}\r\n`), data, Buffer.from('\r\n0\r\n\r\n')])
}

t.test('a transfer coding Node leaves on the content is refused as unverifiable, never as a mismatch', async (t) => {
  const { app, calls } = await buildApp()
  const port = await listen(app)
  t.teardown(() => app.close())
  const head = (codings: string, digest: string) => [
    'POST / HTTP/1.1', 'Host: localhost', 'Content-Type: application/json', `Transfer-Encoding: ${codings}`, `Content-Digest: ${digest}`
  ]
  for (const codings of ['gzip, chunked', 'GZIP,chunked', 'deflate, gzip, chunked']) {
    const response = await rawRequest(port, head(codings, helloSha256), [chunked(gzipSync(hello))])
    t.equal(response.status, 400, codings)
    t.same(JSON.parse(response.body), {
      type: 'about:blank',
      title: 'Bad Request',
      detail: `the content cannot be verified: this server does not remove its transfer coding ${codings.split(',')[0]?.toLowerCase()}`
    }, codings)
  }
  t.equal(calls.handler, 0)
  // Chunked alone is removed by Node: the content is verified as usual.
  const plain = await rawRequest(port, head('chunked', helloSha256), [chunked(Buffer.from(hello))])
  t.equal(plain.status, 200, plain.body)
  t.equal(calls.handler, 1)
})
