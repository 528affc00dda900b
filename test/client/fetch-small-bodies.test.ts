// Issue 18, found by an attack on the client: fetch() never settled when the interceptor failed a
// body under 16 KiB over HTTP/1.1. The error came in the same parser pass as the last data, before
// fetch's stream had pulled; it is now told on a later turn. A hang here is the runner's timeout.
import { createHash } from 'node:crypto'
import { createServer } from 'node:http'
import t from 'tap'
import { Agent, fetch } from 'undici'
import { digestInterceptor, DigestMismatchError, DigestUnverifiableError } from '../../lib/client.js'
import { serving } from '../helpers.js'

t.setTimeout(20_000)

const other = (size: number): string => `sha-256=:${createHash('sha256').update('x'.repeat(size + 1)).digest('base64')}:`

t.test('fetch() rejects a small body that fails, with the digest in the header or the trailer section, or none required', async (t) => {
  const server = createServer((request, response) => {
    const [, where, size] = (request.url as string).split('/')
    const body = 'x'.repeat(Number(size))
    if (where === 'header') response.writeHead(200, { 'content-digest': other(Number(size)) }).end(body)
    else if (where === 'none') response.end(body)
    else {
      response.writeHead(200, { trailer: 'content-digest' })
      response.addTrailers({ 'content-digest': other(Number(size)) })
      response.end(body)
    }
  })
  const origin = await serving(t, server)
  const agent = new Agent()
  t.teardown(() => agent.close())
  const dispatcher = agent.compose(digestInterceptor({ unverifiable: 'require' }))
  for (const where of ['header', 'trailer', 'none']) {
    for (const size of [0, 100, 16_000, 16_384, 100_000]) {
      const response = await fetch(`${origin}/${where}/${size}`, { dispatcher })
      const error = await response.arrayBuffer().then(() => null, (error: Error) => error.cause)
      t.ok(error instanceof (where === 'none' ? DigestUnverifiableError : DigestMismatchError), `${where}, ${size} bytes: rejected`)
    }
  }
})
