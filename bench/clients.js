// The load side of the benchmark: child servers, autocannon runs and 1 GiB streamed uploads.
import { fork } from 'node:child_process'
import { once } from 'node:events'
import { request } from 'node:http'
import autocannon from 'autocannon'

/** Starts `bench/server.js <variant>` in its own process; resolves once it listens. */
export async function startServer (variant) {
  const child = fork(new URL('./server.js', import.meta.url), [variant], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
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

/** Requests per second that autocannon sustains for one request shape. */
export async function requestsPerSecond ({ url, path, headers, body, connections, seconds }) {
  const result = await autocannon({ url: url + path, method: 'POST', headers, body, connections, duration: seconds })
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
