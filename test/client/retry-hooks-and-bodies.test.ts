// Issue 18, found by an attack on the client: an async onRetry that rejected crashed the process
// with an unhandled rejection; an ArrayBuffer body and the undici package's own FormData were
// refused; a retry re-read a buffer the caller had changed meanwhile; options that are not an
// object, unknown option names and problem documents on a 2xx were taken.
import { createHash } from 'node:crypto'
import { createServer, type IncomingHttpHeaders } from 'node:http'
import t from 'tap'
import { Agent, FormData as UndiciFormData, request } from 'undici'
import { digestInterceptor, DigestProblemError, type DigestInterceptorOptions } from '../../lib/client.js'
import { serving, type Tap } from '../helpers.js'

interface Seen { headers: IncomingHttpHeaders, body: Buffer }

// Answers every odd request with a mismatch problem, so that each request is retried once.
async function mismatchingFirst (t: Tap): Promise<{ origin: string, seen: Seen[] }> {
  const seen: Seen[] = []
  const server = createServer((incoming, response) => {
    const chunks: Buffer[] = []
    incoming.on('data', (chunk: Buffer) => chunks.push(chunk))
    incoming.on('end', () => {
      seen.push({ headers: incoming.headers, body: Buffer.concat(chunks) })
      if (seen.length % 2 === 1) {
        response.writeHead(400, { 'content-type': 'application/problem+json' })
        response.end('{"type":"https://iana.org/assignments/http-problem-types#digest-mismatching-value"}')
      } else {
        response.end('ok')
      }
    })
  })
  return { origin: await serving(t, server), seen }
}

function client (t: Tap, options: DigestInterceptorOptions = {}): ReturnType<Agent['compose']> {
  const agent = new Agent()
  t.teardown(() => agent.close())
  return agent.compose(digestInterceptor(options))
}

t.test('onRetry may return a promise: the retry waits for it, and a rejection fails the request', async (t) => {
  const { origin, seen } = await mismatchingFirst(t)
  const waited: string[] = []
  const patient = client(t, { onRetry: async () => { await new Promise((resolve) => setImmediate(resolve)); waited.push('told') } })
  t.equal(await (await request(origin, { method: 'POST', dispatcher: patient, body: 'x' })).body.text(), 'ok')
  t.same(waited, ['told'])
  const failing = client(t, { onRetry: async () => { throw new Error('logger unavailable') } })
  await t.rejects(request(origin, { method: 'POST', dispatcher: failing, body: 'x' }), { message: 'logger unavailable' })
  t.equal(seen.length, 3, 'no retry after the rejection')
})

t.test('an ArrayBuffer and the undici package\'s FormData are digested as sent', async (t) => {
  const { origin, seen } = await mismatchingFirst(t)
  const dispatcher = client(t, { maxRetries: 0 })
  const form = new UndiciFormData()
  form.append('field', 'value')
  for (const body of [new Uint8Array([1, 2, 3]).buffer, form]) {
    await (await request(origin, { method: 'POST', dispatcher, body: body as unknown as string })).body.dump()
  }
  for (const { headers, body } of seen) {
    t.equal(headers['content-digest'], `sha-256=:${createHash('sha256').update(body).digest('base64')}:`)
  }
  t.same(seen[0]?.body, Buffer.from([1, 2, 3]))
  t.match(seen[1]?.headers['content-type'], /^multipart\/form-data; boundary=/)
  t.match(seen[1]?.body.toString(), /name="field"\r\n\r\nvalue/)
})

t.test('a retry sends the bytes first sent, even when the caller changed its buffer meanwhile', async (t) => {
  const { origin, seen } = await mismatchingFirst(t)
  const body = Buffer.from('amount=10')
  const dispatcher = client(t, { onRetry: () => { body.write('99', 7) } })
  await (await request(origin, { method: 'POST', dispatcher, body })).body.dump()
  t.same(seen.map(({ body }) => body.toString()), ['amount=10', 'amount=10'])
  t.equal(seen[1]?.headers['content-digest'], seen[0]?.headers['content-digest'])
})

t.test('options are an object of known names; a 2xx is never a problem', async (t) => {
  for (const options of [null, 5, { maxRetry: 2 }]) {
    t.throws(() => digestInterceptor(options as DigestInterceptorOptions), { name: 'TypeError', code: 'FST_DIGEST_FIELDS_INVALID_OPTION' }, JSON.stringify(options))
  }
  t.equal(DigestProblemError.from(200, { 'content-type': 'application/problem+json' }, { type: '#digest-mismatching-value' }), null)
})
