import { mkdtempSync, renameSync, rmSync, truncateSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import Fastify from 'fastify'
import fastifyStatic from '@fastify/static'
import { request } from 'undici'
import fastifyDigestFields, { staticFileDigests } from '../../lib/index.js'
import { fuzzSeed, listen, member, seededBytes } from '../helpers.js'

// What the attack on issue 25 found of file responses, pinned: a file rewritten while its first
// response streams its digest in the trailer section must not end as if complete.

t.comment(`seed ${fuzzSeed}`)

t.test('a large static file rewritten while its first response streams is cut short, not delivered as complete', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'rewritten-'))
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  const path = join(root, 'large.bin')
  const original = seededBytes(32 * 1024 * 1024, fuzzSeed + 3)
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields, { fileDigests: { hashBeforeSending: 64 * 1024 } })
  await app.register(fastifyStatic, { root, setHeaders: staticFileDigests() })
  const port = await listen(app)
  const get = async (headers: Record<string, string> = {}): Promise<import('undici').Dispatcher.ResponseData> =>
    await request(`http://127.0.0.1:${port}/large.bin`, { headers, highWaterMark: 16 * 1024 } as object)

  // Truncated and written again in place: neither version.
  writeFileSync(path, original)
  const rewritten = await get()
  t.equal(rewritten.headers['content-length'], undefined, 'a large file first streams with trailer digests')
  truncateSync(path, 0)
  writeFileSync(path, seededBytes(100_000, fuzzSeed + 4))
  await t.rejects(rewritten.body.arrayBuffer(), 'the response is cut short')

  // A range of it, likewise.
  writeFileSync(path, original)
  const range = await get({ range: `bytes=0-${original.length - 1000}` })
  t.equal(range.statusCode, 206)
  truncateSync(path, 1000)
  await t.rejects(range.body.arrayBuffer(), 'a range cut short too')

  // Another file renamed over it: the response sends the file it opened, whole.
  writeFileSync(path, original)
  const replaced = await get()
  writeFileSync(join(root, 'next.bin'), seededBytes(1000, fuzzSeed + 5))
  renameSync(join(root, 'next.bin'), path)
  t.ok(Buffer.from(await replaced.body.arrayBuffer()).equals(original), 'the bytes of the file it opened')
  t.equal(replaced.trailers['content-digest'], member('sha-256', original), 'and their digest')
})
