// The package as npm delivers it: the packed tarball installed into scratch applications (ES
// modules and CommonJS in JavaScript, TypeScript under nodenext and bundler resolution), each
// serving real requests on this Node version. Run by .ci/run on Node 20, 22 and 24.
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { cp, mkdtemp, readFile, rm } from 'node:fs/promises'
import { once } from 'node:events'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import t from 'tap'
import { request } from 'undici'
import { hello, helloSha256, problemTypes } from '../helpers.js'

const run = promisify(execFile)
const root = fileURLToPath(new URL('../..', import.meta.url))
const tsc = join(root, 'node_modules/typescript/bin/tsc')

t.setTimeout(300_000)

async function versionOf (name: string): Promise<string> {
  return (JSON.parse(await readFile(join(root, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version
}

async function serve (entry: string, cwd: string): Promise<{ child: ChildProcess, origin: string }> {
  const child = spawn(process.execPath, [entry], { cwd, stdio: ['ignore', 'pipe', 'inherit'] })
  const exited = once(child, 'exit').then(([code]) => { throw new Error(`${entry} exited with ${String(code)} before listening`) })
  const [line] = await Promise.race([once(createInterface({ input: child.stdout as NodeJS.ReadableStream }), 'line'), exited]) as [string]
  const { port } = JSON.parse(line) as { port: number }
  return { child, origin: `http://127.0.0.1:${port}` }
}

const app = await mkdtemp(join(tmpdir(), 'digest-package-'))
t.teardown(() => rm(app, { recursive: true, force: true }))
await cp(join(root, 'test/fixtures/package-apps'), app, { recursive: true })
// dist/ is built by pretest; packing it again here would rebuild it under the other tests' feet.
const { stdout: packed } = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', app], { cwd: root })
const [{ filename, files }] = JSON.parse(packed) as [{ filename: string, files: Array<{ path: string }> }]
// The dependencies come from npm's cache when `npm ci` filled it, from the registry otherwise.
await run('npm', ['init', '-y'], { cwd: app })
// TypeScript 7, the native compiler, is what `npm install typescript` gives users: the scratch
// application has it, and the repository's TypeScript 6 (which tap's loader needs) compiles too.
await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', join(app, filename),
  `fastify@${await versionOf('fastify')}`, `@types/node@${await versionOf('@types/node')}`, `undici@${await versionOf('undici')}`, 'typescript@7'],
{ cwd: app })

t.test('the tarball holds both entries, their types, and no source map', async (t) => {
  const paths = files.map(({ path }) => path)
  for (const path of ['LICENSE', 'CHANGELOG.md', 'dist/index.cjs', 'dist/index.d.cts', 'dist/index.js', 'dist/index.mjs', 'dist/index.d.ts', 'dist/index.d.mts', 'dist/types.d.ts', 'dist/package.json',
    'dist/client.js', 'dist/client.mjs', 'dist/client.d.ts', 'dist/client.d.mts']) {
    t.ok(paths.includes(path), path)
  }
  t.same(paths.filter((path) => path.endsWith('.map') || path.startsWith('lib/') || path.startsWith('test')), [])
})

t.test('TypeScript applications compile under nodenext and bundler resolution, with TypeScript 6 and 7', async (t) => {
  // TypeScript 7's `tsc` is a native executable in a package for the platform: run it as it is,
  // since the test runner hooks every Node process it starts, which its ES module launcher trips.
  const tsc7 = join(app, `node_modules/@typescript/typescript-${process.platform}-${process.arch}/lib/tsc`)
  const { stdout: version } = await run(tsc7, ['--version'], { cwd: app })
  t.match(version, /^Version 7\./, 'the scratch application has TypeScript 7')
  for (const config of ['tsconfig.nodenext.json', 'tsconfig.bundler.json']) {
    // A failure here prints the compiler's diagnostics (an unused @ts-expect-error among them).
    await t.resolves(run(process.execPath, [tsc, '-p', config], { cwd: app }), `${config}, TypeScript 6`)
    await t.resolves(run(tsc7, ['-p', config, '--noEmit'], { cwd: app }), `${config}, TypeScript 7`)
  }
})

const applications = [
  ['ES modules', 'esm.mjs'],
  ['CommonJS', 'cjs.cjs'],
  ['TypeScript nodenext, ES module', 'out/nodenext/app.mjs'],
  ['TypeScript nodenext, CommonJS', 'out/nodenext/app.cjs'],
  ['TypeScript bundler', 'out/bundler/app.mjs']
] as const

for (const [name, entry] of applications) {
  t.test(`${name}: a verified request passes and a tampered one gets the problem`, async (t) => {
    const { child, origin } = await serve(entry, app)
    t.teardown(() => { child.kill() })
    const headers = { 'content-type': 'application/json', 'content-digest': helloSha256 }

    const good = await request(`${origin}/orders`, { method: 'POST', headers, body: hello })
    t.equal(good.statusCode, 200)
    t.match(await good.body.json(), { fields: ['content-digest'] })

    const tampered = await request(`${origin}/orders`, { method: 'POST', headers, body: hello.replace('world', 'w0rld') })
    t.equal(tampered.statusCode, 400)
    t.equal(tampered.headers['content-type'], 'application/problem+json')
    t.match(await tampered.body.json(), { type: `${problemTypes}digest-mismatching-value`, algorithm: 'sha-256' })

    const missing = await request(`${origin}/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: hello })
    t.equal(missing.statusCode, 400)
    t.match(await missing.body.json(), { type: 'about:blank', detail: /requires a Content-Digest/ })
  })
}

t.test('the client entry digests a request the plugin verifies, from ES modules, CommonJS and TypeScript', async (t) => {
  const { child, origin } = await serve('esm.mjs', app)
  t.teardown(() => { child.kill() })
  for (const entry of ['client.mjs', 'client.cjs', 'out/nodenext/client.mjs', 'out/bundler/client.mjs']) {
    const { stdout } = await run(process.execPath, [entry, origin], { cwd: app })
    t.match(JSON.parse(stdout), { status: 200, body: { fields: ['content-digest'] }, error: 'DigestMismatchError' }, entry)
  }
})
