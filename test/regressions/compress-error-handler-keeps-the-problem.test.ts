// Found by an attack after issue 16: with @fastify/compress decompressing requests, its error
// handler assigned its own error's code, statusCode and message to the problem the plugin had
// failed the request stream with. onError hooks saw FST_CP_ERR_INVALID_CONTENT, and content that
// decodes past bodyLimit was answered 400 "Content Too Large". The problem now keeps its fields.
import { gzipSync } from 'node:zlib'
import t from 'tap'
import Fastify from 'fastify'
import fastifyCompress from '@fastify/compress'
import fastifyDigestFields from '../../lib/index.js'
import { member, problemTypes } from '../helpers.js'

const cases = [
  ['content that decodes past bodyLimit', { 'unencoded-digest': member('sha-256', 'x') }, gzipSync(Buffer.alloc(4 << 20)), 413, 'FST_DIGEST_FIELDS_CONTENT_TOO_LARGE'],
  ['a wrong Content-Digest of gzip content', { 'content-digest': member('sha-256', 'x') }, gzipSync('{"a":1}'), 400, 'FST_DIGEST_FIELDS_MISMATCHING_VALUE']
] as const

for (const disclosure of ['full', 'none'] as const) {
  t.test(`through @fastify/compress, the problem keeps its status and code (disclosure ${disclosure})`, async (t) => {
    const app = Fastify()
    await app.register(fastifyDigestFields, { disclosure })
    await app.register(fastifyCompress)
    const seen: unknown[] = []
    app.addHook('onError', async (_request, _reply, error) => { seen.push([(error as Error & { code?: string }).code, (error as Error & { statusCode?: number }).statusCode]) })
    app.post('/items', async () => ({ ok: true }))
    for (const [name, headers, payload, status, code] of cases) {
      const response = await app.inject({ method: 'POST', url: '/items', headers: { 'content-type': 'application/json', 'content-encoding': 'gzip', ...headers }, payload })
      t.equal(response.statusCode, status, name)
      const body = response.json()
      if (disclosure === 'none') t.same(body, { type: 'about:blank', title: status === 413 ? 'Content Too Large' : 'Bad Request' }, name)
      else t.equal(body.type, status === 413 ? 'about:blank' : problemTypes + 'digest-mismatching-value', name)
      t.same(seen.pop(), [disclosure === 'none' && status === 400 ? 'FST_DIGEST_FIELDS_BAD_REQUEST' : code, status], `${name}: what onError saw`)
    }
  })
}
