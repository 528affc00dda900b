import { createHash } from 'node:crypto'
import { Readable } from 'node:stream'
import { gzipSync } from 'node:zlib'
import t from 'tap'
import Fastify from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { problemTypes } from '../helpers.js'

// Found by the attack on issue 15's change: under inject() (which serverless adapters serve
// production traffic through), a handler reading request.raw with data and end listeners only got
// an empty end and answered 200 to a wrong digest, or no answer came at all. light-my-request
// listens for 'error' on its own request and pushes an end on every read once done: neither may
// count as a reader, or end the content, once its digest failed.

const sha256 = (data: string | Buffer): string => `sha-256=:${createHash('sha256').update(data).digest('base64')}:`

t.test('under inject(), a reader with data and end listeners only never sees an end of content whose digest failed', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_request, _payload, done) => done(null))
  let ended = 0
  app.post('/', (request, reply) => {
    let stored = 0
    request.raw.on('data', (chunk: Buffer) => { stored += chunk.length })
    request.raw.on('end', () => { ended++; reply.send({ stored }) })
  })
  const content = Buffer.from('tampered content')
  const cases: Array<[string, Record<string, string>, () => Buffer | Readable, number]> = [
    ['Content-Digest, Buffer payload', { 'content-digest': sha256('other content') }, () => content, 400],
    ['Content-Digest, stream payload', { 'content-digest': sha256('other content') }, () => Readable.from([content]), 400],
    ['Unencoded-Digest of gzip, Buffer payload', { 'content-encoding': 'gzip', 'unencoded-digest': sha256('other content') }, () => gzipSync(content), 400],
    ['Unencoded-Digest of gzip, stream payload', { 'content-encoding': 'gzip', 'unencoded-digest': sha256('other content') }, () => Readable.from([gzipSync(content)]), 400],
    ['the right Content-Digest', { 'content-digest': sha256(content) }, () => content, 200],
    ['the right Content-Digest, stream payload', { 'content-digest': sha256(content) }, () => Readable.from([content]), 200]
  ]
  for (const [name, headers, payload, status] of cases) {
    const response = await app.inject({ method: 'POST', url: '/', payload: payload(), headers: { 'content-type': 'application/octet-stream', ...headers } })
    t.equal(response.statusCode, status, `${name}: ${response.body}`)
    if (status === 400) t.equal(response.json().type, problemTypes + 'digest-mismatching-value', name)
    else t.same(response.json(), { stored: content.length }, name)
  }
  t.equal(ended, 2, 'only the content whose digest matched ended for the reader')
})
