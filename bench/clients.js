// The load side of the benchmark: child processes (servers and the createHash floor), autocannon
// runs, and streamed uploads and downloads.
import { execFileSync, spawn } from 'node:child_process'
import { once } from 'node:events'
import { request } from 'node:http'
import { cpus } from 'node:os'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'

// On two or more cores, children run on the last core and this process (the load generator) on
// the first, so that neither takes time from the other and the server's work limits the rate.
const childCore = cpus().length - 1
export const pinned = childCore > 0 && (() => {
  try {
    execFileSync('taskset', ['-cp', '0', String(process.pid)], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
})()

function startChild (script, args, env = process.env) {
  const path = fileURLToPath(new URL(script, import.meta.url))
  // BENCH_CPU_PROF=<dir> writes a V8 CPU profile of every child into dir.
  // BENCH_NODE_FLAGS adds Node and V8 flags to every child's command line.
  const flags = (process.env.BENCH_NODE_FLAGS ?? '').split(' ').filter((flag) => flag !== '')
  const node = [process.execPath, ...flags, ...(process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : []), path, ...args]
  const [command, rest] = pinned ? ['taskset', ['-c', String(childCore), ...node]] : [node[0], node.slice(1)]
  return spawn(command, rest, { stdio: ['ignore', 'ignore', 'inherit', 'ipc'], env })
}

/** Starts `bench/server.js <variant>` in a fresh process (with `env`); resolves once it listens. */
export async function startServer (variant, env) {
  const child = startChild('./server.js', [variant], env)
  const [{ port }] = await once(child, 'message')
  return {
    url: `http://127.0.0.1:${port}`,
    /** CPU seconds used so far and peak RSS in bytes. */
    async stats () {
      child.send('stats')
      const [stats] = await once(child, 'message')
      return stats
    },
    async stop () {
      child.kill()
      await once(child, 'exit')
    }
  }
}

/** CPU seconds that crypto.createHash alone needs for `mib` MiB in `chunkBytes` chunks, in a fresh process. */
export async function hashAlone (algorithm, mib, chunkBytes) {
  const child = startChild('./hash-alone.js', [algorithm, String(mib), String(chunkBytes)])
  const [{ cpu }] = await once(child, 'message')
  await once(child, 'exit')
  return cpu
}

async function load (options) {
  const result = await autocannon(options)
  if (result.errors > 0 || result.non2xx > 0 || result.timeouts > 0) {
    throw new Error(`${options.url}: ${result.errors} errors, ${result.timeouts} timeouts, ${result.non2xx} non-2xx responses`)
  }
  return result
}

/**
 * The requests per second that autocannon sustains for one request shape on `server`, and the
 * server's CPU time per request meanwhile (in µs), which does not depend on how fast the load
 * generator is. A warm-up run of `warmup` seconds sets how many requests the measured run sends
 * (about `seconds` worth), and the rate is that count over the measured run's own wall time: a few
 * large bodies a second are then not rounded to whole requests, nor cut off in flight at the end.
 */
export async function requestsPerSecond ({ server, method = 'POST', path, headers, body, connections, pipelining, warmup, seconds, requests }) {
  // requests: autocannon's sequence of requests that each connection cycles through, if any.
  const options = { url: server.url + path, method, headers, body, connections, pipelining, ...(requests === undefined ? {} : { requests }) }
  const calibration = await load({ ...options, duration: warmup })
  const amount = Math.max(connections * pipelining * 4, Math.round(calibration.requests.total / warmup * seconds))
  const before = await server.stats()
  const started = process.hrtime.bigint()
  await load({ ...options, amount })
  const wall = Number(process.hrtime.bigint() - started) / 1e9
  const after = await server.stats()
  return { rps: amount / wall, cpu: (after.cpu - before.cpu) / amount * 1e6 }
}

/** Streams `blocks` copies of `block` to PUT /upload; resolves with the wall time in seconds. */
export async function upload (url, block, blocks, headers, path = '/upload') {
  const started = process.hrtime.bigint()
  const req = request(url + path, {
    method: 'PUT',
    headers: { 'content-type': 'application/x-upload', 'content-length': block.length * blocks, ...headers }
  })
  const response = new Promise((resolve, reject) => {
    req.on('response', (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode))
    })
    req.on('error', reject)
  })
  for (let i = 0; i < blocks; i++) {
    if (!req.write(block)) await once(req, 'drain')
  }
  req.end()
  const status = await response
  if (status !== 200) throw new Error(`upload to ${url} answered ${status}`)
  return Number(process.hrtime.bigint() - started) / 1e9
}

/** Downloads GET /download?mib=; resolves with the bytes received and the Repr-Digest trailer. */
export function download (url, mib, headers) {
  return new Promise((resolve, reject) => {
    request(`${url}/download?mib=${mib}`, { headers }, (response) => {
      let bytes = 0
      response.on('data', (chunk) => { bytes += chunk.length })
      response.on('end', () => resolve({ bytes, trailer: response.trailers['repr-digest'] }))
      response.on('error', reject)
    }).on('error', reject).end()
  })
}

async function undiciDispatcher (intercepted) {
  const { Agent } = await import('undici')
  const { digestInterceptor } = await import('fastify-digest-fields/client')
  const agent = new Agent({ connections: 50 })
  return { agent, dispatcher: intercepted ? agent.compose(digestInterceptor()) : agent }
}

/**
 * POSTs `body` to /json from 50 concurrent loops of undici's request() for `seconds`, after a
 * second of warm-up; resolves with requests per second and this process's CPU per request in µs.
 */
export async function undiciRequests (url, intercepted, headers, body, seconds) {
  const { request } = await import('undici')
  const { agent, dispatcher } = await undiciDispatcher(intercepted)
  const run = async (duration) => {
    const until = process.hrtime.bigint() + BigInt(Math.round(duration * 1e9))
    let count = 0
    await Promise.all(Array.from({ length: 50 }, async () => {
      while (process.hrtime.bigint() < until) {
        const response = await request(`${url}/json`, { method: 'POST', dispatcher, headers, body })
        await response.body.dump()
        if (response.statusCode !== 200) throw new Error(`${url}/json answered ${response.statusCode}`)
        count++
      }
    }))
    return count
  }
  await run(1)
  const cpu = process.cpuUsage()
  const started = process.hrtime.bigint()
  const count = await run(seconds)
  const wall = Number(process.hrtime.bigint() - started) / 1e9
  const used = process.cpuUsage(cpu)
  await agent.close()
  return { rps: count / wall, cpu: (used.user + used.system) / count }
}

/** Downloads GET /download?mib= with undici, asking for a sha-256 Repr-Digest; resolves with this process's CPU seconds. */
export async function undiciDownload (url, intercepted, mib) {
  const { request } = await import('undici')
  const { agent, dispatcher } = await undiciDispatcher(intercepted)
  const cpu = process.cpuUsage()
  const response = await request(`${url}/download?mib=${mib}`, { dispatcher, headers: { 'want-repr-digest': 'sha-256=1' } })
  let bytes = 0
  for await (const chunk of response.body) bytes += chunk.length
  const used = process.cpuUsage(cpu)
  await agent.close()
  if (bytes !== mib * 1024 * 1024 || response.trailers['repr-digest'] === undefined) throw new Error(`download of ${bytes} bytes`)
  return { cpu: (used.user + used.system) / 1e6 }
}

/** GETs each of `paths` once, `concurrency` at a time, reading every body to its end. */
export async function getEach (url, paths, concurrency) {
  const { request: get } = await import('undici')
  const queue = [...paths]
  const worker = async () => {
    for (let path = queue.shift(); path !== undefined; path = queue.shift()) {
      const response = await get(url + path)
      if (response.statusCode !== 200) throw new Error(`${path}: ${response.statusCode}`)
      await response.body.dump()
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
}
