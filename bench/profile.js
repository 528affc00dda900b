// `node bench/profile.js <variant> <body bytes> [seconds]`: one server of bench/server.js under the
// sweep's load (a sha-256 Content-Digest unless the variant is bare), with a V8 CPU profile written
// to bench-profiles/ and summarised by bench/profile-summary.js. A sketch for finding where a
// configuration's time goes; the figures in BENCHMARKS.md come from npm run bench.
import { randomBytes } from 'node:crypto'
import { mkdirSync, readdirSync } from 'node:fs'
import { execFileSync } from 'node:child_process'
import { requestsPerSecond, startServer } from './clients.js'
import { digestField } from './shared.js'

const [variant, size, seconds = '5'] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4] ?? 5)]
const dir = new URL(`../bench-profiles/${variant}-${size}/`, import.meta.url).pathname
mkdirSync(dir, { recursive: true })
process.env.BENCH_CPU_PROF = dir
const body = randomBytes(size)
const headers = { 'content-type': 'application/octet-stream' }
if (variant !== 'bare') headers['content-digest'] = digestField('sha-256', [body])
const server = await startServer(variant)
const { rps } = await requestsPerSecond({ server, path: '/bytes', headers, body, connections: size >= 4 * 1024 * 1024 ? 2 : 8, pipelining: 1, warmup: 1, seconds })
await server.stop()
console.log(`${variant}, ${size} bytes: ${rps.toFixed(0)} req/s`)
const profile = readdirSync(dir).sort().at(-1)
console.log(execFileSync(process.execPath, [new URL('./profile-summary.js', import.meta.url).pathname, dir + profile, '20'], { encoding: 'utf8' }))
