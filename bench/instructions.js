// `node bench/instructions.js [warm-up] [requests] [variant[@build]:header ...]`: instructions a
// 1 KiB JSON POST costs the server, counted by valgrind's callgrind, with the configurations of
// bench/cpu-per-request.js (mix included). The count does not depend on the machine's speed, which on a shared
// machine moves CPU time per request by up to 2x between processes of one build, so it resolves
// differences of 1% where CPU time cannot resolve 5%. Each server runs under callgrind, counting
// only while the measured requests run, after a warm-up that lets V8 optimise the hot path. One
// connection sends one request at a time: with more, how many requests one turn of the event loop
// takes depends on the machine's speed, and so does the count a request. BENCH_CONNECTIONS=50
// counts under npm run bench's load all the same, to set beside what it times.
// Instructions are not time (a cache miss or a slow instruction counts as one), so this shows
// where work is, not what it costs; OpenSSL under callgrind hashes without the SHA extensions.
// BENCH_CACHE_SIM=1 also simulates the caches (callgrind --cache-sim=yes, this machine's sizes) and
// gives each configuration's misses a request and its estimated cycles, Ir + 10 for each first-level
// miss + 100 for each last-level miss (cachegrind's estimate): what memory traffic adds to the count.
import { execFileSync, spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'
import { median, smallJsonBody, smallJsonRequests } from './shared.js'

const [warmUp = 3000, measured = 2000, ...wanted] = process.argv.slice(2)
const configs = wanted.length > 0 ? wanted : ['floor:sha-256', 'bare:none', 'plugin:none', 'plugin:sha-256']
const body = smallJsonBody()
const connections = Number(process.env.BENCH_CONNECTIONS ?? 1)
const cacheSim = process.env.BENCH_CACHE_SIM === '1'
const server = fileURLToPath(new URL('./server.js', import.meta.url))
const out = mkdtempSync(join(tmpdir(), 'digest-instructions-'))

async function count (config) {
  const [name, algorithm] = config.split(':')
  const [variant, build] = name.split('@')
  const file = join(out, 'callgrind.out')
  const child = spawn('valgrind', ['--tool=callgrind', '--instr-atstart=no', `--cache-sim=${cacheSim ? 'yes' : 'no'}`, `--callgrind-out-file=${file}`, process.execPath, server, variant],
    { stdio: ['ignore', 'ignore', 'ignore', 'ipc'], env: build === undefined ? process.env : { ...process.env, BENCH_PLUGIN: build } })
  try {
    const [{ port }] = await once(child, 'message')
    const send = async (amount) => {
      const result = await autocannon({ url: `http://127.0.0.1:${port}/json`, method: 'POST', body, ...smallJsonRequests(algorithm, body), connections, amount: Number(amount), timeout: 60 })
      if (result.non2xx > 0 || result.errors > 0 || result['2xx'] !== Number(amount)) throw new Error(`${config}: ${result.non2xx} non-2xx, ${result.errors} errors`)
    }
    await send(warmUp)
    execFileSync('callgrind_control', ['--instr=on', String(child.pid)], { stdio: 'ignore' })
    await send(measured)
    execFileSync('callgrind_control', ['--instr=off', String(child.pid)], { stdio: 'ignore' })
  } finally {
    child.kill()
    await once(child, 'exit')
  }
  const text = readFileSync(file, 'utf8')
  const events = /^events: (.+)$/m.exec(text)
  const totals = /^totals: ([\d ]+)$/m.exec(text)
  if (events === null || totals === null) throw new Error(`${config}: callgrind wrote no totals`)
  const counted = Object.fromEntries(events[1].split(' ').map((event, i) => [event, Number(totals[1].split(' ')[i] ?? 0) / Number(measured)]))
  if (!cacheSim) return { value: counted.Ir }
  const firstLevel = counted.I1mr + counted.D1mr + counted.D1mw
  const lastLevel = counted.ILmr + counted.DLmr + counted.DLmw
  return { value: counted.Ir + 10 * firstLevel + 100 * lastLevel, code: counted.I1mr, data: counted.D1mr + counted.D1mw, lastLevel }
}

// A server's count moves by a few percent when a collection or a compilation falls inside the
// measured requests: each configuration is counted BENCH_REPEATS times (3), in rounds.
const repeats = Number(process.env.BENCH_REPEATS ?? 3)
try {
  const samples = Object.fromEntries(configs.map((config) => [config, []]))
  for (let round = 0; round < repeats; round++) {
    for (const config of configs) samples[config].push(await count(config))
  }
  const [first] = configs
  const values = (config) => samples[config].map(({ value }) => value)
  const base = median(values(first))
  const thousands = (value) => (value / 1000).toFixed(1)
  const unit = cacheSim ? 'estimated cycles' : 'instructions'
  for (const config of configs) {
    const value = median(values(config))
    const misses = (kind) => median(samples[config].map((sample) => sample[kind])).toFixed(0)
    const cache = cacheSim ? `; first-level misses: code ${misses('code')}, data ${misses('data')}; last-level ${misses('lastLevel')}` : ''
    console.log(`${config.padEnd(22)} ${thousands(value).padStart(6)}k ${unit}/request (${thousands(Math.min(...values(config)))}k to ${thousands(Math.max(...values(config)))}k)${config === first ? '' : `  ${(value / base).toFixed(3)}x ${first}`}${cache}`)
  }
} finally {
  rmSync(out, { recursive: true, force: true })
}
