// Found by an attack: two save() calls to one destination were both taken, and commit() reported
// both, with their sizes and digests, while the disk held only the last. An application storing
// the first's digest stored a digest of bytes it did not keep. A second save to a destination
// already saved to (by any spelling of its path) is now refused, and the first stands.
import { createHash } from 'node:crypto'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import t from 'tap'
import Fastify from 'fastify'
import fastifyDigestFields from '../../lib/index.js'

t.test('a second save() to a destination already saved to is refused, and commit() reports what is on disk', async (t) => {
  const folder = t.testdir()
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields)
  app.post('/', async (request) => {
    const files = request.verifiedFiles()
    await files.save(Readable.from(['the first file']), join(folder, 'upload.bin'))
    await t.rejects(files.save(Readable.from(['second']), join(folder, 'sub', '..', 'upload.bin')),
      { code: 'FST_DIGEST_FIELDS_INVALID_OPTION', message: /has a file saved to it already/ })
    const { files: committed } = await files.commit()
    return committed.map(({ destination, size, digest }) => ({ destination, size, digest: digest.toString('hex') }))
  })
  const response = await app.inject({ method: 'POST', url: '/', payload: 'x', headers: { 'content-type': 'text/plain' } })
  t.same(response.json(), [{
    destination: join(folder, 'upload.bin'),
    size: 14,
    digest: createHash('sha256').update('the first file').digest('hex')
  }])
  t.equal(readFileSync(join(folder, 'upload.bin'), 'utf8'), 'the first file')
  t.same(readdirSync(folder), ['upload.bin'], 'no temporary file left')
})
