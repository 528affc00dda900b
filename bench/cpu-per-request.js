// `node bench/cpu-per-request.js [rounds] [requests] [variant:header ...]`: server CPU per request
// for the 1 KiB JSON POST of npm run bench, each measurement in a fresh pinned server process after
// a warm-up, configurations shuffled each round (BENCH_SEED replays the order), median and range in µs. A variant is a server of
// bench/server.js; the header is none, sha-256 or sha-512 (Content-Digest), or mix: every
// connection alternates a request with a sha-256 Content-Digest and one without (the median of a
// mix is then compared with the mean of none and sha-256 of the same variant in the same round); each
// configuration after the first is also given as the median of its per-round ratios to the first. For
// A/B tests of the hot path, plugin@<path to a build's index.js> loads another build: plugin@/tmp/a/index.js:sha-256.
import autocannon from 'autocannon'
import { startServer } from './clients.js'
import { benchSeed, median, seededShuffle, smallJsonBody, smallJsonRequests } from './shared.js'

const [rounds = 5, requests = 100000, ...wanted] = process.argv.slice(2)
const configs = wanted.length > 0 ? wanted : ['bare:none', 'plugin:none', 'plugin:sha-256', 'raw-body:sha-256', 'streaming:sha-256']
const body = smallJsonBody()
const shuffled = seededShuffle(benchSeed)
console.error(`seed ${benchSeed} (BENCH_SEED replays the order)`)
const samples = Object.fromEntries(configs.map((config) => [config, []]))

async function measure (config) {
  const [name, algorithm] = config.split(':')
  const [variant, build] = name.split('@')
  const server = await startServer(variant, build === undefined ? process.env : { ...process.env, BENCH_PLUGIN: build })
  try {
    const options = { url: `${server.url}/json`, method: 'POST', body, connections: 50, ...smallJsonRequests(algorithm, body) }
    await autocannon({ ...options, duration: 2 })
    const before = await server.stats()
    const result = await autocannon({ ...options, amount: Number(requests) })
    const after = await server.stats()
    if (result.non2xx > 0 || result.errors > 0) throw new Error(`${config}: ${result.non2xx} non-2xx, ${result.errors} errors`)
    return (after.cpu - before.cpu) / Number(requests) * 1e6
  } finally {
    await server.stop()
  }
}

for (let round = 0; round < Number(rounds); round++) {
  for (const config of shuffled(configs)) samples[config].push(await measure(config))
}
const [first] = configs
for (const [config, values] of Object.entries(samples)) {
  // Each round's ratio to the first configuration of the same round: what noise between rounds cancels from.
  const ratios = values.map((value, round) => value / samples[first][round])
  const ratio = config === first ? '' : `  ${median(ratios).toFixed(3)}x ${first} (${Math.min(...ratios).toFixed(2)} to ${Math.max(...ratios).toFixed(2)})`
  console.log(`${config.padEnd(22)} ${median(values).toFixed(2).padStart(6)} µs/request (${Math.min(...values).toFixed(2)} to ${Math.max(...values).toFixed(2)})${ratio}`)
  const [name, algorithm] = config.split(':')
  const [none, sha256] = [samples[`${name}:none`], samples[`${name}:sha-256`]]
  if (algorithm === 'mix' && none !== undefined && sha256 !== undefined) {
    const ratios = values.map((value, round) => value / ((none[round] + sha256[round]) / 2))
    console.log(`${''.padEnd(22)} ${median(ratios).toFixed(2)}x the mean of none and sha-256 (${Math.min(...ratios).toFixed(2)} to ${Math.max(...ratios).toFixed(2)})`)
  }
}
