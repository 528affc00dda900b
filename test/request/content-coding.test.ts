import { gzipSync } from 'node:zlib'
import t from 'tap'
import Fastify from 'fastify'
import fastifyCompress from '@fastify/compress'
import { request } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import { hello, helloSha256, listen, member, problemTypes } from '../helpers.js'

// RFC 9530 sections 2 and 3: with Content-Encoding: gzip both Content-Digest and Repr-Digest are
// computed over the gzip bytes, so the plugin must hash before @fastify/compress inflates them.
const gzipped = gzipSync(hello)
const headers = { 'content-type': 'application/json', 'content-encoding': 'gzip' }

for (const order of ['compress registered first', 'digest fields registered first']) {
  t.test(`verifies a gzip-encoded body over the encoded bytes (${order})`, async (t) => {
    const app = Fastify()
    if (order === 'compress registered first') {
      await app.register(fastifyCompress)
      await app.register(fastifyDigestFields)
    } else {
      await app.register(fastifyDigestFields)
      await app.register(fastifyCompress)
    }
    let handled = 0
    app.post('/', async (request) => { handled++; return request.body })
    const port = await listen(app)
    t.teardown(() => app.close())
    const url = `http://127.0.0.1:${port}/`

    const encoded = await request(url, { method: 'POST', body: gzipped, headers: { ...headers, 'content-digest': member('sha-256', gzipped), 'repr-digest': member('sha-512', gzipped) } })
    t.equal(encoded.statusCode, 200)
    t.same(await encoded.body.json(), { hello: 'world' }, 'the handler got the decompressed body')

    // The digest of the decoded content is the wrong one for an encoded request.
    const decoded = await request(url, { method: 'POST', body: gzipped, headers: { ...headers, 'content-digest': helloSha256 } })
    t.equal(decoded.statusCode, 400)
    const problem = await decoded.body.json() as Record<string, string>
    t.equal(problem.type, problemTypes + 'digest-mismatching-value')
    t.equal(problem['calculated-digest'], `:${member('sha-256', gzipped).slice('sha-256=:'.length)}`)
    t.equal(handled, 1)
  })
}
