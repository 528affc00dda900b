// The load side of the benchmark: child servers, autocannon runs and 1 GiB streamed uploads.
import { execFileSync, spawn } from 'node:child_process'
import { once } from 'node:events'
import { request } from 'node:http'
import { cpus } from 'node:os'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'

// On two or more cores, servers run on the last core and the load generator on the first, so that
// neither takes time from the other and the server's work is what limits the rate.
const serverCore = cpus().length - 1
const pinned = serverCore > 0 && (() => {
  try {
    execFileSync('taskset', ['-cp', '0', String(process.pid)], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
})()

/** Starts `bench/server.js <variant>` in its own process; resolves once it listens. */
export async function startServer (variant) {
  const script = fileURLToPath(new URL('./server.js', import.meta.url))
  // BENCH_CPU_PROF=<dir> writes a V8 CPU profile of every server into dir.
  const node = [process.execPath, ...(process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : []), script, variant]
  const [command, args] = pinned ? ['taskset', ['-c', String(serverCore), ...node]] : [node[0], node.slice(1)]
  const child = spawn(command, args, { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
  const [{ port }] = await once(child, 'message')
  return {
    variant,
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

/**
 * Requests per second that autocannon sustains for one request shape. Pipelined, as Fastify's own
 * benchmarks are, so that the client's per-request cost does not cap the rate.
 */
export async function requestsPerSecond ({ url, path, headers, body, connections, pipelining, seconds }) {
  const result = await autocannon({ url: url + path, method: 'POST', headers, body, connections, pipelining, duration: seconds })
  if (result.errors > 0 || result.non2xx > 0) {
    throw new Error(`${url}${path}: ${result.errors} errors, ${result.non2xx} non-2xx responses`)
  }
  return result.requests.average
}

/** Streams `blocks` copies of `block` to PUT /upload; resolves with the wall time in seconds. */
export async function upload (url, block, blocks, headers) {
  const started = process.hrtime.bigint()
  const req = request(`${url}/upload`, {
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
