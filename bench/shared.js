// What the benchmark scripts share: the requests they send, the digest fields of those requests,
// the seeded order of configurations, and the median.
import { createHash } from 'node:crypto'

/** A 1 KiB JSON document: a few fields and a description that pads it to exactly 1024 bytes. */
export function smallJsonBody () {
  const fields = { id: 42, name: 'quarterly report', tags: ['finance', 'q3'], description: '' }
  return JSON.stringify({ ...fields, description: 'x'.repeat(1024 - JSON.stringify(fields).length) })
}

/** The Content-Digest value of `algorithm` (sha-256 or sha-512) over the chunks of a body. */
export function digestField (algorithm, chunks) {
  const hash = createHash(algorithm === 'sha-256' ? 'sha256' : 'sha512')
  for (const chunk of chunks) hash.update(chunk)
  return `${algorithm}=:${hash.digest('base64')}:`
}

/**
 * The autocannon options that send the 1 KiB JSON POST `body` with the Content-Digest `field`
 * names: none, sha-256, sha-512, or mix, every connection alternating a request without a field
 * and one with a sha-256 Content-Digest.
 */
export function smallJsonRequests (field, body) {
  const headers = { 'content-type': 'application/json' }
  const digested = (algorithm) => ({ headers: { ...headers, 'content-digest': digestField(algorithm, [body]) } })
  if (field === 'none') return { headers }
  if (field === 'mix') return { headers, requests: [{ headers }, digested('sha-256')] }
  return digested(field)
}

/** A shuffle driven by mulberry32 from `seed`, so that BENCH_SEED replays the order of a run. */
export function seededShuffle (seed) {
  let state = seed >>> 0
  const random = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let x = Math.imul(state ^ (state >>> 15), state | 1)
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61)
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
  return (list) => {
    const result = [...list]
    for (let i = result.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1))
      ;[result[i], result[j]] = [result[j], result[i]]
    }
    return result
  }
}

/** The seed of a run: BENCH_SEED, or a random one to print. */
export const benchSeed = Number(process.env.BENCH_SEED ?? Math.floor(Math.random() * 2 ** 31))

export function median (values) {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}
