import t from 'tap'
import Fastify from 'fastify'
import fastifyMultipart from '@fastify/multipart'
import { request } from 'undici'
import fastifyDigestFields from '../lib/index.js'
import { listen, rawRequest } from './helpers.js'

// @fastify/multipart reads request.raw, past the payload stream the plugin verifies. Content read
// that way was not verified, so a request whose integrity fields cannot be checked is refused
// before the handler runs rather than passed on as if it had been.

async function multipartBody (): Promise<{ body: Buffer, contentType: string }> {
  const form = new FormData()
  form.append('name', 'report')
  form.append('file', new Blob(['file content']), 'report.txt')
  const encoded = new Response(form)
  return { body: Buffer.from(await encoded.arrayBuffer()), contentType: encoded.headers.get('content-type') as string }
}

for (const attachFieldsToBody of [false, true]) {
  t.test(`refuses integrity fields on a route that reads request.raw (multipart, attachFieldsToBody: ${attachFieldsToBody})`, async (t) => {
    const app = Fastify()
    await app.register(fastifyDigestFields)
    await app.register(fastifyMultipart, { attachFieldsToBody })
    const uploads: string[] = []
    app.post('/upload', async (request) => {
      if (attachFieldsToBody) {
        uploads.push((request.body as Record<string, { value: string }>).name?.value ?? '')
      } else {
        for await (const part of request.parts()) {
          uploads.push(part.fieldname)
          if (part.type === 'file') await part.toBuffer()
        }
      }
      return { digest: request.digest }
    })
    const port = await listen(app)
    t.teardown(() => app.close())
    const { body, contentType } = await multipartBody()
    const { createHash } = await import('node:crypto')
    const digest = `sha-256=:${createHash('sha256').update(body).digest('base64')}:`
    const url = `http://127.0.0.1:${port}/upload`

    const refused = await request(url, { method: 'POST', body, headers: { 'content-type': contentType, 'content-digest': digest } })
    t.equal(refused.statusCode, 400)
    t.equal(refused.headers['content-type'], 'application/problem+json')
    t.same(await refused.body.json(), {
      type: 'about:blank',
      title: 'Bad Request',
      detail: 'the integrity fields of this request cannot be verified: the route does not read its content through the request payload stream'
    })
    t.same(uploads, [], 'the handler never ran')

    const plain = await request(url, { method: 'POST', body, headers: { 'content-type': contentType } })
    t.equal(plain.statusCode, 200)
    t.same(await plain.body.json(), { digest: null })
    t.ok(uploads.length > 0)
  })
}

t.test('refuses integrity fields for content a bodyless method never reads', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  let handled = 0
  app.get('/', async () => { handled++; return 'ok' })
  const port = await listen(app)
  t.teardown(() => app.close())
  const head = ['GET / HTTP/1.1', 'Host: localhost', 'Content-Length: 5', 'Content-Digest: sha-256=:LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=:']
  const response = await rawRequest(port, head, [Buffer.from('hello')])
  t.equal(response.status, 400)
  t.equal(JSON.parse(response.body).type, 'about:blank')
  t.equal(handled, 0)
})
