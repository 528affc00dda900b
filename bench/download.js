// `node bench/download.js`: the server CPU a solicited Repr-Digest costs on a streamed download,
// against what crypto.createHash alone needs for the same bytes. A fresh server process per
// measurement, the two cases alternating, BENCH_DOWNLOAD_MIB MiB (default 1024) a download.
import { createHash } from 'node:crypto'
import { request } from 'node:http'
import { startServer } from './clients.js'

const mib = Number(process.env.BENCH_DOWNLOAD_MIB ?? 1024)
const rounds = Number(process.env.BENCH_ROUNDS ?? 3)
const block = Buffer.alloc(1024 * 1024, 'download ')

function download (url, headers) {
  return new Promise((resolve, reject) => {
    request(`${url}/download?mib=${mib}`, { headers }, (response) => {
      let bytes = 0
      response.on('data', (chunk) => { bytes += chunk.length })
      response.on('end', () => resolve({ bytes, trailer: response.trailers['repr-digest'] }))
      response.on('error', reject)
    }).on('error', reject).end()
  })
}

async function serverCpu (want) {
  const server = await startServer('plugin')
  try {
    const before = await server.stats()
    const { bytes, trailer } = await download(server.url, want === null ? {} : { 'want-repr-digest': `${want}=1` })
    const after = await server.stats()
    if (bytes !== mib * 1024 * 1024 || (want !== null) !== (trailer !== undefined)) throw new Error(`download of ${bytes} bytes, trailer ${trailer}`)
    return after.cpu - before.cpu
  } finally {
    await server.stop()
  }
}

function hashAlone (algorithm) {
  const start = process.cpuUsage()
  const hash = createHash(algorithm)
  for (let i = 0; i < mib; i++) hash.update(block)
  hash.digest()
  const { user, system } = process.cpuUsage(start)
  return (user + system) / 1e6
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]
const rows = []
for (const [algorithm, node] of [['sha-256', 'sha256'], ['sha-512', 'sha512']]) {
  const extra = []
  const alone = []
  for (let round = 0; round < rounds; round++) {
    const [without, withDigest] = [await serverCpu(null), await serverCpu(algorithm)]
    extra.push(withDigest - without)
    alone.push(hashAlone(node))
    process.stderr.write(`round ${round + 1}/${rounds} ${algorithm}: without ${without.toFixed(3)} s, with ${withDigest.toFixed(3)} s, createHash alone ${alone.at(-1).toFixed(3)} s\n`)
  }
  const perGiB = (seconds) => (seconds / (mib / 1024)).toFixed(3)
  rows.push(`| ${algorithm} | ${perGiB(median(extra))} (${perGiB(Math.min(...extra))} to ${perGiB(Math.max(...extra))}) | ${perGiB(median(alone))} | ${(median(extra) / median(alone)).toFixed(2)}x |`)
}
console.log(`Streamed download of ${mib} MiB, Want-Repr-Digest answered in the trailer section; ${rounds} rounds, medians (range).\n`)
console.log('| algorithm | extra server CPU s/GiB | createHash alone s/GiB | ratio |')
console.log('|---|---|---|---|')
for (const row of rows) console.log(row)
