import { spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { once } from 'node:events'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { deflateSync } from 'node:zlib'
import t from 'tap'
import { request } from 'undici'
import { fuzzSeed, seededRandom } from '../helpers.js'

// Issue 15, item 4: the side decoder of Unencoded-Digest queued the compressed upload in memory
// while zlib was slower than the reader (a 104 MiB deflate upload peaked 102 MiB above the same
// upload checked with Content-Digest). The decoder's input is now bounded: the connection waits
// for it. Each configuration gets a fresh server process, whose own peak resident set is compared.
// The bound is a quarter of the upload: far under the queue it pins, and over the collector's noise
// (one CI run on Node 26 peaked 18 MiB above, others 2 to 10).

t.comment(`seed ${fuzzSeed} (DIGEST_FUZZ_SEED replays it)`)
// Heavier than most files: more than the runner's 30 s default on a loaded 2-core machine.
t.setTimeout(120_000)

// Bytes of four bits of entropy each: deflate halves them, and inflating them is slower than a
// reader that discards what it reads.
function content (size: number): Buffer {
  const random = seededRandom(fuzzSeed)
  const data = Buffer.allocUnsafe(size)
  for (let i = 0; i < size; i += 4) {
    const word = (random() * 2 ** 32) >>> 0
    data[i] = 0x40 | (word & 0x0f)
    data[i + 1] = 0x40 | ((word >>> 8) & 0x0f)
    data[i + 2] = 0x40 | ((word >>> 16) & 0x0f)
    data[i + 3] = 0x40 | ((word >>> 24) & 0x0f)
  }
  return data
}

async function peakAfterUpload (t: Tap, coded: Buffer, headers: Record<string, string>): Promise<{ peak: number, body: unknown }> {
  const server = spawn(process.execPath, [join(import.meta.dirname, '../fixtures', 'upload-memory-server.mjs')], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { server.kill() })
  const [line] = await once(createInterface({ input: server.stdout }), 'line') as [string]
  const origin = `http://127.0.0.1:${line}`
  const response = await request(`${origin}/upload`, {
    method: 'POST',
    headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'deflate', ...headers },
    body: coded
  })
  const body = await response.body.json()
  t.equal(response.statusCode, 200, JSON.stringify(body))
  const memory = await request(`${origin}/memory`)
  const { peak } = await memory.body.json() as { peak: number }
  return { peak, body }
}

type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

t.test('a 128 MiB coded upload checked with Unencoded-Digest peaks within 32 MiB of the same upload checked with Content-Digest', async (t) => {
  const original = content(240 * 1024 * 1024)
  const coded = deflateSync(original, { level: 1 })
  t.ok(coded.length >= 128 * 1024 * 1024, `the coded upload is ${(coded.length / 2 ** 20).toFixed(1)} MiB`)
  const unencoded = `sha-256=:${createHash('sha256').update(original).digest('base64')}:`
  const sent = `sha-256=:${createHash('sha256').update(coded).digest('base64')}:`
  const decoding = await peakAfterUpload(t, coded, { 'unencoded-digest': unencoded })
  t.same(decoding.body, { length: coded.length, fields: ['unencoded-digest'] })
  const plain = await peakAfterUpload(t, coded, { 'content-digest': sent })
  t.same(plain.body, { length: coded.length, fields: ['content-digest'] })
  const above = (decoding.peak - plain.peak) / 2 ** 20
  t.comment(`peak resident set: ${(decoding.peak / 2 ** 20).toFixed(1)} MiB decoding, ${(plain.peak / 2 ** 20).toFixed(1)} MiB not, ${above.toFixed(1)} MiB above`)
  t.ok(above <= 32, `the decoding server peaks ${above.toFixed(1)} MiB above the other, at most 32`)
})
