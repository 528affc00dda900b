// hash-wasm, whose WebAssembly only resumable uploads need, is loaded once the first upload asks
// for a running digest, never by an application without resumable routes (it was about 4 ms of
// the plugin's import). Run against the build (`npm test` builds first), in a process of its own,
// whose CommonJS module cache says what was loaded.
import { execFileSync } from 'node:child_process'
import { join } from 'node:path'
import t from 'tap'

const entry = join(import.meta.dirname, '../../dist/index.js')

const program = `
const Fastify = require('fastify')
const plugin = require(${JSON.stringify(entry)})
const loaded = () => Object.keys(require.cache).some((path) => path.includes('/node_modules/hash-wasm/'))
const seen = []
;(async () => {
  const app = Fastify()
  await app.register(plugin)
  app.post('/items', async () => ({}))
  app.post('/uploads', { config: { digest: { resumable: { creation: true } } } }, async (request) => {
    for await (const chunk of request.raw) void chunk
    return {}
  })
  await app.ready()
  seen.push(loaded())
  await app.inject({ method: 'POST', url: '/items', payload: { a: 1 } })
  await app.inject({ method: 'POST', url: '/items', payload: { a: 1 }, headers: { 'upload-complete': '?1' } })
  seen.push(loaded())
  const created = await app.inject({ method: 'POST', url: '/uploads', payload: 'abc', headers: {
    'upload-complete': '?1', 'content-type': 'text/plain', 'repr-digest': 'sha-256=:' + require('node:crypto').hash('sha256', 'abc', 'base64') + ':'
  } })
  seen.push(created.statusCode, loaded())
  console.log(JSON.stringify(seen))
})()
`

t.test('hash-wasm is not loaded until the first resumable upload needs it', async (t) => {
  const printed = execFileSync(process.execPath, ['-e', program], { encoding: 'utf8', cwd: join(import.meta.dirname, '../..') })
  t.same(JSON.parse(printed), [false, false, 200, true], 'not at registration, nor by other routes; by an upload creation')
})
