import { spawn, spawnSync } from 'node:child_process'
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createServer, request as httpRequest, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { crc32, deflateSync } from 'node:zlib'
import t from 'tap'
import Fastify from 'fastify'
import fastifyCompress from '@fastify/compress'
import fastifyStatic from '@fastify/static'
import fastifyDigestFields, { staticFileDigests, type FastifyDigestFieldsOptions } from '../../lib/index.js'
import { listen } from '../helpers.js'

// A real browser as the client (response-digests.md): Chromium headless loads a page whose
// script, fetch() and image carry Unencoded-Digest, from a server with @fastify/static and
// @fastify/compress. Its verdict is the oracle: it loads them as sent, refuses each one a proxy
// changed by one byte, and loads them again when the proxy also drops the digest, which shows the
// refusal is the digest's. Signed scripts load under their key's integrity and no other.

const chromium = process.env.CHROMIUM ?? 'chromium'

/** An 8x8 PNG, with bytes after its end that decoders ignore: the proxy flips the last one. */
function png (): Buffer {
  const chunk = (type: string, data: Buffer): Buffer => {
    const typed = Buffer.concat([Buffer.from(type), data])
    const length = Buffer.alloc(4)
    length.writeUInt32BE(data.length)
    const crc = Buffer.alloc(4)
    crc.writeUInt32BE(crc32(typed))
    return Buffer.concat([length, typed, crc])
  }
  const header = Buffer.alloc(13)
  header.writeUInt32BE(8, 0)
  header.writeUInt32BE(8, 4)
  header[8] = 8
  header[9] = 2
  const row = Buffer.concat([Buffer.from([0]), Buffer.alloc(24, 0x7f)])
  return Buffer.concat([Buffer.from('89504e470d0a1a0a', 'hex'), chunk('IHDR', header),
    chunk('IDAT', deflateSync(Buffer.concat(Array(8).fill(row)))), chunk('IEND', Buffer.alloc(0)), Buffer.from('pad!')])
}

/** A page that loads a script, fetches JSON and shows an image, and beacons what loaded. */
function page (integrity: string): string {
  return `<!doctype html><meta charset=utf-8><link rel=icon href="data:,">
<script>
  const result = { script: 'pending' }
  const fetched = fetch('/data.json').then((response) => response.text())
    .then((text) => { result.fetch = text.includes('"marker"') ? 'loaded' : 'wrong' }, () => { result.fetch = 'refused' })
  const loaded = new Promise((resolve) => addEventListener('load', resolve))
  Promise.all([fetched, loaded]).then(() => {
    if (result.script === 'pending') result.script = window.scriptRan ? 'loaded' : 'not run'
    navigator.sendBeacon('/report?run=' + new URLSearchParams(location.search).get('run'), JSON.stringify(result))
  })
</script>
<script src="/app.js"${integrity} onload="result.script = window.scriptRan ? 'loaded' : 'not run'" onerror="result.script = 'refused'"></script>
<img src="/pixel.png" onload="result.img = 'loaded'" onerror="result.img = 'refused'">
`
}

const rawKey = (key: KeyObject): string => Buffer.from(key.export({ format: 'jwk' }).x as string, 'base64url').toString('base64')

interface Verdict { script?: string, fetch?: string, img?: string }

function browserTests (): void {
  const signing = generateKeyPairSync('ed25519')
  const other = generateKeyPairSync('ed25519')
  const root = mkdtempSync(join(tmpdir(), 'chromium-root-'))
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  writeFileSync(join(root, 'index.html'), page(''))
  writeFileSync(join(root, 'signed.html'), page(` integrity="ed25519-${rawKey(signing.publicKey)}"`))
  writeFileSync(join(root, 'other-key.html'), page(` integrity="ed25519-${rawKey(other.publicKey)}"`))
  // Each still valid after its last byte is flipped, so that only a digest can refuse it.
  writeFileSync(join(root, 'app.js'), 'window.scriptRan = true\n// x')
  writeFileSync(join(root, 'data.json'), '{"marker": true, "pad": "x"}')
  writeFileSync(join(root, 'pixel.png'), png())

  const reports = new Map<string, (verdict: Verdict) => void>()
  let runs = 0

  async function app (options: FastifyDigestFieldsOptions, compressFirst: boolean): Promise<string> {
    const server = Fastify()
    if (compressFirst) await server.register(fastifyCompress, { threshold: 0 })
    await server.register(fastifyDigestFields, options)
    if (!compressFirst) await server.register(fastifyCompress, { threshold: 0 })
    await server.register(fastifyStatic, { root, setHeaders: staticFileDigests() })
    server.post('/report', { config: { digest: false } }, async (request) => {
      reports.get(String((request.query as { run?: string }).run))?.(JSON.parse(String(request.body)) as Verdict)
      return 'ok'
    })
    t.teardown(() => server.close())
    return `http://127.0.0.1:${await listen(server)}`
  }

  /** A proxy that flips the last byte of each subresource, fetched without coding, and may drop its digest. */
  async function tamperingProxy (upstream: string, dropDigest: boolean): Promise<string> {
    const subresources = new Set(['/app.js', '/data.json', '/pixel.png'])
    const server: Server = createServer((request, response) => {
      const url = new URL(request.url as string, upstream)
      const headers = { ...request.headers, host: url.host }
      const tamper = subresources.has(url.pathname)
      if (tamper) headers['accept-encoding'] = 'identity'
      const forward = httpRequest(url, { method: request.method, headers }, (upstreamResponse) => {
        const chunks: Buffer[] = []
        upstreamResponse.on('data', (chunk: Buffer) => chunks.push(chunk))
        upstreamResponse.on('end', () => {
          const body = Buffer.concat(chunks)
          const sent = { ...upstreamResponse.headers }
          if (tamper) {
            body[body.length - 1] = (body[body.length - 1] as number) ^ 1
            sent['content-length'] = String(body.length)
            if (dropDigest) delete sent['unencoded-digest']
          }
          response.writeHead(upstreamResponse.statusCode as number, sent).end(body)
        })
      })
      request.pipe(forward)
    })
    server.listen(0, '127.0.0.1')
    await new Promise((resolve) => server.once('listening', resolve))
    t.teardown(() => server.close())
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  }

  /** Chromium's verdict on a page: what it reported, once it reported (no fixed wait). */
  async function load (url: string): Promise<Verdict> {
    const run = String(++runs)
    const profile = mkdtempSync(join(tmpdir(), 'chromium-profile-'))
    const child = spawn(chromium, ['--headless=new', '--no-sandbox', '--disable-gpu', `--user-data-dir=${profile}`,
      '--no-first-run', '--no-default-browser-check', '--disable-background-networking', '--disable-extensions',
      '--disable-component-update', '--disable-sync', '--mute-audio', '--log-level=3', `${url}?run=${run}`],
    { detached: true, stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, TMPDIR: profile } })
    let stderr = ''
    child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
    const exited = new Promise((resolve) => child.once('exit', resolve))
    let timer: NodeJS.Timeout | undefined
    try {
      return await Promise.race([
        new Promise<Verdict>((resolve) => reports.set(run, resolve)),
        exited.then((code) => { throw new Error(`Chromium exited (${String(code)}) before reporting:\n${stderr}`) }),
        // A bound on a browser that hangs, not a synchronisation: a report ends the wait.
        new Promise<never>((_resolve, reject) => { timer = setTimeout(() => reject(new Error(`no report in 60 s:\n${stderr}`)), 60_000) })
      ])
    } finally {
      clearTimeout(timer)
      reports.delete(run)
      try { process.kill(-(child.pid as number), 'SIGKILL') } catch {}
      if (child.exitCode === null && child.signalCode === null) await exited
      rmSync(profile, { recursive: true, force: true })
    }
  }

  for (const compressFirst of [true, false]) {
    t.test(`script, fetch and image load with their Unencoded-Digest, and each is refused once a byte changes (@fastify/compress ${compressFirst ? 'before' : 'after'} the plugin)`, async (t) => {
      const origin = await app({}, compressFirst)
      t.same(await load(`${origin}/index.html`), { script: 'loaded', fetch: 'loaded', img: 'loaded' }, 'as sent, compressed where Chromium asks')
      t.same(await load(`${await tamperingProxy(origin, false)}/index.html`), { script: 'refused', fetch: 'refused', img: 'refused' }, 'one byte changed: refused by the digest')
      t.same(await load(`${await tamperingProxy(origin, true)}/index.html`), { script: 'loaded', fetch: 'loaded', img: 'loaded' }, 'the same bytes without the digest load')
    })
  }

  t.test('a script signed with integritySignatures runs under its key\'s integrity and is blocked under another\'s', async (t) => {
    const signed = await app({ integritySignatures: { privateKey: signing.privateKey } }, false)
    t.same(await load(`${signed}/signed.html`), { script: 'loaded', fetch: 'loaded', img: 'loaded' }, 'its own key: every response signed, all load')
    t.match(await load(`${signed}/other-key.html`), { script: 'refused' }, 'another key')
    const unsigned = await app({}, false)
    t.match(await load(`${unsigned}/signed.html`), { script: 'refused' }, 'no signature at all')
  })
}
const found = spawnSync(chromium, ['--version'], { encoding: 'utf8' })
if (found.status !== 0) {
  // .ci/run installs Chromium; elsewhere a machine without it says so rather than passing.
  if (process.env.CI === 'true') throw new Error(`Chromium is required in CI: ${found.error?.message ?? found.stderr}`)
  t.test('Chromium headless', { skip: `Chromium is not installed (${chromium}): apt-get install -y chromium` }, async () => {})
} else {
  // Three browsers started one after another: more than tap's 30 s on a busy 2-core machine.
  t.setTimeout(180_000)
  t.comment(found.stdout.trim())
  browserTests()
}
