// save() gives each file's size and digest by the route's most preferred algorithm, taken as the
// file is written (no second read), and commit() gives them all with the request's verdict. The
// oracle is openssl over the files left at their destinations.
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import Fastify from 'fastify'
import fastifyMultipart from '@fastify/multipart'
import { request } from 'undici'
import fastifyDigestFields, { type CommittedFiles, type SavedFile } from '../../lib/index.js'
import { fuzzSeed, listen, seededBytes } from '../helpers.js'

t.comment(`seed ${fuzzSeed}`)

const openssl = (algorithm: string, path: string): string =>
  execFileSync('openssl', ['dgst', `-${algorithm}`, '-binary', path]).toString('base64')

t.test('multipart files: each save() and commit() give the size and digest of what was written', async (t) => {
  const folder = mkdtempSync(join(tmpdir(), 'saved-digests-'))
  t.teardown(() => rmSync(folder, { recursive: true, force: true }))
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields)
  await app.register(fastifyMultipart)
  const seen: Array<{ saved: SavedFile[], committed: CommittedFiles }> = []
  const upload = async (request: import('fastify').FastifyRequest): Promise<object> => {
    const files = request.verifiedFiles()
    const saved: SavedFile[] = []
    for await (const part of request.parts()) {
      if (part.type === 'file') saved.push(await files.save(part.file, join(folder, part.filename)))
    }
    const committed = await files.commit()
    seen.push({ saved, committed })
    return { files: committed.files.length }
  }
  app.post('/sha-512', { config: { digest: { algorithms: ['sha-512', 'sha-256'] } } }, upload)
  app.post('/default', upload)
  const origin = `http://127.0.0.1:${await listen(app)}`

  const contents = [seededBytes(0, fuzzSeed), seededBytes(70_000, fuzzSeed + 1), seededBytes(1_000_000, fuzzSeed + 2)]
  for (const [path, algorithm, openssled] of [['/sha-512', 'sha-512', 'sha512'], ['/default', 'sha-256', 'sha256']] as const) {
    const form = new FormData()
    contents.forEach((content, i) => { form.append(`file${i}`, new Blob([content]), `${path.slice(1)}-${i}.bin`) })
    form.append('note', 'a field')
    // Serialized once: each serialization draws its own boundary.
    const serialized = new Response(form)
    const body = Buffer.from(await serialized.arrayBuffer())
    const response = await request(`${origin}${path}`, {
      method: 'POST',
      body,
      headers: {
        'content-type': serialized.headers.get('content-type') as string,
        'content-digest': `sha-256=:${createHash('sha256').update(body).digest('base64')}:`
      }
    })
    t.equal(response.statusCode, 200)
    t.same(await response.body.json(), { files: 3 })
    const { saved, committed } = seen.pop() as { saved: SavedFile[], committed: CommittedFiles }
    t.same(committed.digest?.fields, ['content-digest'], 'the request verdict beside the files')
    t.same(committed.files, saved, 'commit() gives what each save() gave')
    contents.forEach((content, i) => {
      const file = saved[i] as SavedFile
      const destination = join(folder, `${path.slice(1)}-${i}.bin`)
      t.equal(file.destination, destination)
      t.equal(file.size, content.length, `${path} file ${i}: its size`)
      t.equal(file.algorithm, algorithm, `${path}: the route's most preferred algorithm`)
      t.equal(file.digest.toString('base64'), openssl(openssled, destination), `${path} file ${i}: the digest of the file at its destination`)
    })
  }
})

t.test('a route declared before the plugin, which the plugin verifies with its defaults, digests its files with sha-256', async (t) => {
  const folder = mkdtempSync(join(tmpdir(), 'saved-digests-'))
  t.teardown(() => rmSync(folder, { recursive: true, force: true }))
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  app.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
  app.put('/early', async (request) => {
    const files = request.verifiedFiles()
    const saved = await files.save(request.raw, join(folder, 'early.bin'))
    await files.commit()
    return { algorithm: saved.algorithm, size: saved.size }
  })
  await app.register(fastifyDigestFields, { algorithms: ['sha-512'] })
  const body = seededBytes(5000, fuzzSeed + 3)
  const response = await app.inject({ method: 'PUT', url: '/early', payload: body, headers: { 'content-type': 'application/octet-stream' } })
  t.same(response.json(), { algorithm: 'sha-256', size: 5000 })
  t.equal(openssl('sha256', join(folder, 'early.bin')), createHash('sha256').update(body).digest('base64'))
})
