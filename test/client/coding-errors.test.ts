// Issue 18, found by an attack on the client: content that does not decode switched the
// Unencoded-Digest check off. gzip of other content with one byte after its end, or a truncated
// gzip stream, made the side decoder fail, which counted as "cannot be verified" and was ignored by
// default, while fetch() decoded and handed over the other content whole. Such content is now
// refused, whatever `unverifiable` says.
import { createHash } from 'node:crypto'
import { createServer } from 'node:http'
import { deflateSync, gzipSync } from 'node:zlib'
import t from 'tap'
import { Agent, fetch, request } from 'undici'
import { digestInterceptor, DigestUnverifiableError } from '../../lib/client.js'
import { fuzzSeed, seededBytes, serving } from '../helpers.js'

t.comment(`seed ${fuzzSeed} (DIGEST_FUZZ_SEED replays it)`)

// Incompressible enough that half of its gzip stream is a truncated stream, not the whole of it.
const original = Buffer.from('pay 10 EUR to alice\n' + seededBytes(3000, fuzzSeed).toString('hex'))
const other = Buffer.from('pay 9999 EUR to mallory\n'.repeat(200))
const bodies: Record<string, [string, Buffer]> = {
  '/other-content-and-a-byte': ['gzip', Buffer.concat([gzipSync(other), Buffer.from([0])])],
  '/truncated': ['gzip', gzipSync(original).subarray(0, gzipSync(original).length >> 1)],
  '/deflate-and-bytes': ['deflate', Buffer.concat([deflateSync(other), Buffer.from('tail')])],
  '/intact': ['gzip', gzipSync(original)]
}

t.test('content that does not decode fails its Unencoded-Digest check, through request() and fetch()', async (t) => {
  const server = createServer((request, response) => {
    const [coding, body] = bodies[request.url as string] as [string, Buffer]
    response.writeHead(200, {
      'content-encoding': coding,
      'content-length': body.length,
      'unencoded-digest': `sha-256=:${createHash('sha256').update(original).digest('base64')}:`
    })
    response.end(body)
  })
  const origin = await serving(t, server)
  for (const unverifiable of ['ignore', 'require'] as const) {
    const agent = new Agent()
    t.teardown(() => agent.close())
    const dispatcher = agent.compose(digestInterceptor({ unverifiable }))
    for (const path of Object.keys(bodies)) {
      const viaRequest = await request(origin + path, { dispatcher })
      const viaFetch = await fetch(origin + path, { dispatcher })
      if (path === '/intact') {
        t.equal(Buffer.from(await viaRequest.body.arrayBuffer()).length, bodies[path]?.[1].length, `${unverifiable} ${path}: request()`)
        t.ok(Buffer.from(await viaFetch.arrayBuffer()).equals(original), `${unverifiable} ${path}: fetch() decodes it`)
        continue
      }
      await t.rejects(viaRequest.body.arrayBuffer(), DigestUnverifiableError, `${unverifiable} ${path}: request()`)
      await t.rejects(viaFetch.text(), `${unverifiable} ${path}: fetch()`)
    }
  }
})

t.test('broken content whose Unencoded-Digest was announced but never sent has nothing to fail', async (t) => {
  const server = createServer((_request, response) => {
    response.writeHead(200, { 'content-encoding': 'gzip', trailer: 'unencoded-digest' })
    response.end(Buffer.from('not gzip'))
  })
  const origin = await serving(t, server)
  const agent = new Agent()
  t.teardown(() => agent.close())
  t.equal(await (await request(origin, { dispatcher: agent.compose(digestInterceptor()) })).body.text(), 'not gzip', 'ignored')
  const strict = await request(origin, { dispatcher: agent.compose(digestInterceptor({ unverifiable: 'require' })) })
  await t.rejects(strict.body.text(), { name: 'DigestUnverifiableError', message: /does not decode/ }, 'required')
})
