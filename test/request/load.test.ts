import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import t from 'tap'
import { Pool } from 'undici'
import { buildApp, fuzzScale, hello, helloSha256, helloSha512, json, listen, member, problemTypes } from '../helpers.js'

// Real sockets, 64 requests in flight, every kind of request mixed: each response must be exactly
// the one expected, and the heap after garbage collection must not grow from round to round.
setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void

const rounds = 6
const perRound = Math.max(1000, Math.round(1000 * fuzzScale))
const concurrency = 64

interface Kind {
  name: string
  method: 'POST' | 'GET'
  headers: Record<string, string>
  status: number
  type?: string
}

const kinds: Kind[] = [
  { name: 'valid sha-256', method: 'POST', headers: { ...json, 'content-digest': helloSha256 }, status: 200 },
  { name: 'valid, both fields', method: 'POST', headers: { ...json, 'content-digest': helloSha512, 'repr-digest': `${helloSha256}, ${helloSha512}` }, status: 200 },
  { name: 'no fields', method: 'POST', headers: json, status: 200 },
  { name: 'mismatch', method: 'POST', headers: { ...json, 'content-digest': member('sha-512', 'x') }, status: 400, type: problemTypes + 'digest-mismatching-value' },
  { name: 'invalid value', method: 'POST', headers: { ...json, 'repr-digest': 'sha-256=:AAAA:' }, status: 400, type: problemTypes + 'digest-invalid-value' },
  { name: 'unsupported', method: 'POST', headers: { ...json, 'content-digest': 'md5=:AAAA:' }, status: 400, type: problemTypes + 'digest-unsupported-algorithm' },
  { name: 'unsupported preference', method: 'GET', headers: { 'want-repr-digest': 'sha=5' }, status: 400, type: problemTypes + 'digest-unsupported-algorithm' },
  { name: 'unparsable', method: 'POST', headers: { ...json, 'content-digest': 'sha-256=:X48E' }, status: 400, type: 'about:blank' },
  { name: 'preference, no content', method: 'GET', headers: { 'want-repr-digest': 'sha-512=3' }, status: 200 }
]

t.test(`${rounds * perRound} requests at concurrency ${concurrency}, mixed, over real sockets`, async (t) => {
  const { app } = await buildApp()
  app.get('/', async () => 'representation')
  const port = await listen(app)
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections: concurrency, pipelining: 1 })
  t.teardown(async () => {
    await pool.close()
    await app.close()
  })

  const wrong: string[] = []
  let sent = 0
  async function send (index: number): Promise<void> {
    const kind = kinds[index % kinds.length] as Kind
    const response = await pool.request({ path: '/', method: kind.method, headers: kind.headers, ...(kind.method === 'POST' ? { body: hello } : {}) })
    const text = await response.body.text()
    sent++
    const type = response.statusCode === 400 ? JSON.parse(text).type : undefined
    if (response.statusCode !== kind.status || type !== kind.type) wrong.push(`${kind.name}: ${response.statusCode} ${text}`)
  }

  const heaps: number[] = []
  for (let round = 0; round < rounds; round++) {
    let next = 0
    await Promise.all(Array.from({ length: concurrency }, async () => {
      while (next < perRound) await send(round * perRound + next++)
    }))
    gc()
    heaps.push(process.memoryUsage().heapUsed)
  }
  t.equal(sent, rounds * perRound)
  t.same(wrong.slice(0, 5), [], `${wrong.length} unexpected responses`)
  const mib = heaps.map((heap) => (heap / 1048576).toFixed(2))
  t.comment(`load: ${sent} requests, heap after gc by round (MiB): ${mib.join(', ')}`)
  // The first round warms caches and connection pools; from the second on, a leak of even a few
  // hundred bytes a request would add megabytes.
  const growth = (heaps[rounds - 1] as number) - (heaps[1] as number)
  t.ok(growth < 2 * 1048576, `heap grew ${(growth / 1048576).toFixed(2)} MiB from round 2 to round ${rounds}`)
})
