import { createHash } from 'node:crypto'
import type { Readable } from 'node:stream'
import t from 'tap'
import Fastify from 'fastify'
import fastifyMultipart, { type MultipartFile } from '@fastify/multipart'
import { request } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import { listen, problemTypes, rawRequest } from '../helpers.js'

// @fastify/multipart reads request.raw, where the plugin verifies: multipart uploads are verified,
// not refused. Before, with attachFieldsToBody, its preValidation, the application's onFile and the
// route's preHandler all ran on content whose digest failed.

async function form (fileContent: string): Promise<{ body: Buffer, contentType: string }> {
  const data = new FormData()
  data.append('name', 'report')
  data.append('file', new Blob([fileContent]), 'report.txt')
  const encoded = new Response(data)
  return { body: Buffer.from(await encoded.arrayBuffer()), contentType: encoded.headers.get('content-type') as string }
}

const sha256 = (data: Buffer): string => `sha-256=:${createHash('sha256').update(data).digest('base64')}:`

/** Reads a file stream to its end, or to its error. */
async function drain (file: Readable): Promise<string> {
  const chunks: Buffer[] = []
  try {
    for await (const chunk of file) chunks.push(chunk as Buffer)
    return `end: ${Buffer.concat(chunks).toString()}`
  } catch (error) {
    return `error: ${(error as Error).message}`
  }
}

t.test('with attachFieldsToBody, no onFile stream ends, and no preHandler or handler runs, on a wrong digest', async (t) => {
  const seen: string[] = []
  const app = Fastify()
  await app.register(fastifyDigestFields)
  await app.register(fastifyMultipart, {
    attachFieldsToBody: true,
    onFile: async (part: MultipartFile) => { seen.push(`onFile ${await drain(part.file)}`) }
  })
  app.post('/upload', { preHandler: async () => { seen.push('preHandler') } }, async (request) => {
    seen.push('handler')
    return { name: (request.body as Record<string, { value: string }>).name?.value, digest: request.digest?.fields }
  })
  const port = await listen(app)
  t.teardown(() => app.close())
  const content = 'file content '.repeat(10_000)
  const { body, contentType } = await form(content)
  const url = `http://127.0.0.1:${port}/upload`

  const right = await request(url, { method: 'POST', body, headers: { 'content-type': contentType, 'content-digest': sha256(body) } })
  t.equal(right.statusCode, 200)
  t.same(await right.body.json(), { name: 'report', digest: ['content-digest'] })
  t.same(seen, [`onFile end: ${content}`, 'preHandler', 'handler'])

  seen.length = 0
  const tampered = Buffer.from(body.toString().replace('file content', 'file CONTENT'))
  const wrong = await request(url, { method: 'POST', body: tampered, headers: { 'content-type': contentType, 'content-digest': sha256(body) } })
  t.equal(wrong.statusCode, 400)
  t.equal(wrong.headers['content-type'], 'application/problem+json')
  t.equal(((await wrong.body.json()) as { type: string }).type, problemTypes + 'digest-mismatching-value')
  t.equal(seen.length, 1)
  t.match(seen[0], /^onFile error: /, 'the file stream saw the error in place of its end')
})

t.test('request.parts() is verified: the last part errors instead of ending on a wrong digest', async (t) => {
  const seen: string[] = []
  const app = Fastify()
  await app.register(fastifyDigestFields)
  await app.register(fastifyMultipart)
  app.post('/upload', async (request) => {
    for await (const part of request.parts()) {
      seen.push(part.type === 'file' ? `${part.fieldname} ${await drain(part.file)}` : `${part.fieldname}=${part.value as string}`)
    }
    seen.push('all parts')
    return { digest: request.digest?.fields }
  })
  const port = await listen(app)
  t.teardown(() => app.close())
  const { body, contentType } = await form('x'.repeat(100_000))
  const head = ['POST /upload HTTP/1.1', 'Host: localhost', `Content-Type: ${contentType}`, `Content-Length: ${body.length}`]
  // In several writes, so that the parts arrive in several chunks.
  const chunks = [body.subarray(0, 300), body.subarray(300, 60_000), body.subarray(60_000)]

  const right = await rawRequest(port, [...head, `Content-Digest: ${sha256(body)}`], chunks)
  t.equal(right.status, 200)
  t.same(JSON.parse(right.body), { digest: ['content-digest'] })
  t.same(seen, ['name=report', `file end: ${'x'.repeat(100_000)}`, 'all parts'])

  seen.length = 0
  const wrong = await rawRequest(port, [...head, `Content-Digest: ${sha256(Buffer.from('other'))}`], chunks)
  t.equal(wrong.status, 400)
  t.equal(JSON.parse(wrong.body).type, problemTypes + 'digest-mismatching-value')
  t.same(seen.slice(0, 1), ['name=report'])
  t.notOk(seen.includes('all parts'), 'the iteration never completed')
  t.notOk(seen.some((entry) => entry.startsWith('file end')), 'the file never ended')
})
