// The interceptor waits before it sends: it reads a streamed body into memory to digest it, hashes
// a large file first (largeBody: 'hash-first'), and waits for onRetry's promise before a retry. A
// consumer that aborted meanwhile (a body that stalls, a user who gives up) was not heard until the
// wait ended, which a stalled body or promise never does: the request hung and held the body. The
// consumer now holds its controller from the start; an abort ends each wait, lets the body go, and
// reaches the consumer as its error, with nothing (more) sent. (fetch() rejects on its own abort
// whatever a dispatcher does; the handler case below is what it relies on.)
import { createReadStream, type ReadStream } from 'node:fs'
import * as fs from 'node:fs'
import { truncate } from 'node:fs/promises'
import { createServer } from 'node:http'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import t from 'tap'
import { Agent, request, type Dispatcher } from 'undici'
import { digestInterceptor, type DigestInterceptorOptions } from '../../lib/client.js'
import { serving, type Tap } from '../helpers.js'

async function counting (t: Tap): Promise<{ origin: string, requests: () => number }> {
  let requests = 0
  const server = createServer((incoming, response) => {
    requests++
    incoming.resume().on('end', () => response.end('ok'))
  })
  t.teardown(() => { server.closeAllConnections() })
  return { origin: await serving(t, server), requests: () => requests }
}

function client (t: Tap, options: DigestInterceptorOptions = { largeBody: 'refuse' }, interceptor = digestInterceptor): Dispatcher {
  const agent = new Agent()
  t.teardown(() => agent.close())
  return agent.compose(interceptor(options))
}

/** A stream that gives one chunk, then stalls: `reading` settles once its second chunk is asked for. */
function stalling (): { body: Readable, reading: Promise<void> } {
  let asked = 0
  let stalled = (): void => {}
  const reading = new Promise<void>((resolve) => { stalled = resolve })
  const body = new Readable({
    read () {
      asked++
      if (asked === 1) this.push('first ')
      else stalled()
    }
  })
  return { body, reading }
}

t.test('request(): an abort while a stalled stream is read rejects at once, destroys the stream, and sends nothing', async (t) => {
  const { origin, requests } = await counting(t)
  const dispatcher = client(t)
  const { body, reading } = stalling()
  const abort = new AbortController()
  const sent = request(origin, { method: 'POST', dispatcher, body, signal: abort.signal })
  await reading
  abort.abort(new Error('gave up'))
  await t.rejects(sent, { message: 'gave up' })
  t.ok(body.destroyed, 'the body was let go')
  // The same dispatcher still serves, and the server saw only that request.
  const next = await request(origin, { method: 'POST', dispatcher, body: 'next' })
  t.equal(await next.body.text(), 'ok')
  t.equal(requests(), 1, 'the aborted request never reached the server')
})

t.test('request(): an abort while an async generator stalls ends the read', async (t) => {
  const { origin, requests } = await counting(t)
  const dispatcher = client(t)
  let stalled = (): void => {}
  const reading = new Promise<void>((resolve) => { stalled = resolve })
  const never = new Promise<never>(() => {})
  async function * body (): AsyncGenerator<string> {
    yield 'first '
    stalled()
    yield await never
  }
  const abort = new AbortController()
  const sent = request(origin, { method: 'POST', dispatcher, body: body() as never, signal: abort.signal })
  await reading
  abort.abort(new Error('gave up'))
  await t.rejects(sent, { message: 'gave up' })
  t.equal(requests(), 0)
})

t.test('a handler of dispatch() that aborts while the body is read gets its error once, and nothing else', async (t) => {
  const { origin, requests } = await counting(t)
  const dispatcher = client(t)
  const { body, reading } = stalling()
  const events: string[] = []
  const ended = new Promise<void>((resolve, reject) => {
    let abort: ((reason: Error) => void) | null = null
    dispatcher.dispatch({ origin, path: '/', method: 'POST', body }, {
      onRequestStart (controller) { abort = (reason) => { controller.abort(reason) }; events.push('start') },
      onResponseStart () { events.push('response') },
      onResponseData () { events.push('data') },
      onResponseEnd () { events.push('end'); resolve() },
      onResponseError (_controller, error) { events.push(`error ${error.message}`); resolve() }
    })
    reading.then(() => { abort?.(new Error('stop')) }, reject)
  })
  await ended
  t.same(events, ['start', 'error stop'])
  t.ok(body.destroyed)
  t.equal(requests(), 0)
})

t.test('a consumer that aborts as its request starts has a stream body let go before any of it is read', async (t) => {
  const { origin, requests } = await counting(t)
  const dispatcher = client(t)
  let reads = 0
  const body = new Readable({ read () { reads++; this.push('never sent') } })
  const events: string[] = []
  await new Promise<void>((resolve) => {
    dispatcher.dispatch({ origin, path: '/', method: 'POST', body }, {
      onRequestStart (controller) { events.push('start'); controller.abort(new Error('at once')) },
      onResponseStart () { events.push('response') },
      onResponseData () { events.push('data') },
      onResponseEnd () { events.push('end') },
      onResponseError (_controller, error) { events.push(`error ${error.message}`); resolve() }
    })
  })
  t.same(events, ['start', 'error at once'])
  t.same([reads, body.destroyed, requests()], [0, true, 0])
})

t.test('a stream that errors while it is read reaches the consumer as its error', async (t) => {
  const { origin, requests } = await counting(t)
  const dispatcher = client(t)
  const body = new Readable({ read () { this.destroy(new Error('disk gone')) } })
  await t.rejects(request(origin, { method: 'POST', dispatcher, body }), { message: 'disk gone' })
  t.equal(requests(), 0)
})

t.test('an abort while onRetry\'s promise is pending rejects at once, and the retry is never sent', async (t) => {
  let requests = 0
  const server = createServer((incoming, response) => {
    requests++
    incoming.resume().on('end', () => {
      response.writeHead(400, { 'content-type': 'application/problem+json' })
      response.end('{"type":"https://iana.org/assignments/http-problem-types#digest-mismatching-value"}')
    })
  })
  t.teardown(() => { server.closeAllConnections() })
  const origin = await serving(t, server)
  let told = (): void => {}
  const asked = new Promise<void>((resolve) => { told = resolve })
  let answer = (): void => {}
  const dispatcher = client(t, { onRetry: async () => { told(); await new Promise<void>((resolve) => { answer = resolve }) } })
  const abort = new AbortController()
  const sent = request(origin, { method: 'POST', dispatcher, body: 'content', signal: abort.signal })
  await asked
  abort.abort(new Error('gave up'))
  await t.rejects(sent, { message: 'gave up' })
  // onRetry answers late: nothing is sent on its word.
  answer()
  const after = await request(origin, { method: 'POST', dispatcher: client(t, { maxRetries: 0 }), body: 'x' })
  await after.body.dump()
  t.equal(requests, 2, 'the first attempt, then only the request made after')
})

t.test("largeBody: 'hash-first': an abort while a large file is hashed ends the hashing and sends nothing", async (t) => {
  const { origin, requests } = await counting(t)
  const folder = t.testdir()
  const path = join(folder, 'large.bin')
  // Sparse: 256 MiB that take no room, read in 64 KiB chunks.
  fs.writeFileSync(path, '')
  await truncate(path, 256 * 1024 * 1024)
  let chunks = 0
  const abort = new AbortController()
  const reading = await t.mockImport<typeof import('../../lib/client/request.js')>('../../lib/client/request.js', {
    'node:fs': {
      ...fs,
      createReadStream: (...args: Parameters<typeof fs.createReadStream>): ReadStream => {
        const stream = fs.createReadStream(...args)
        // The hashing read, from the path: the consumer aborts at its first chunk.
        stream.on('data', () => { if (++chunks === 1) abort.abort(new Error('gave up')) })
        return stream
      }
    }
  })
  const counted = await t.mockImport<typeof import('../../lib/client.js')>('../../lib/client.js', { '../../lib/client/request.js': reading })
  const dispatcher = client(t, { largeBody: 'hash-first', maxBufferedBody: 1024 }, counted.digestInterceptor)
  const body = createReadStream(path)
  await t.rejects(request(origin, { method: 'POST', dispatcher, body, signal: abort.signal }), { message: 'gave up' })
  t.ok(chunks < 16, `the hashing stopped after ${chunks} of 4096 chunks`)
  t.ok(body.destroyed, 'the body was let go')
  t.equal(requests(), 0)

  // A file that fails while it is hashed fails the request with its error, the body let go too.
  const failing = await t.mockImport<typeof import('../../lib/client/request.js')>('../../lib/client/request.js', {
    'node:fs': {
      ...fs,
      createReadStream: (...args: Parameters<typeof fs.createReadStream>): ReadStream => {
        const stream = fs.createReadStream(...args)
        stream.once('data', () => { stream.destroy(Object.assign(new Error('disk read failed'), { code: 'EIO' })) })
        return stream
      }
    }
  })
  const broken = await t.mockImport<typeof import('../../lib/client.js')>('../../lib/client.js', { '../../lib/client/request.js': failing })
  const other = createReadStream(path)
  await t.rejects(request(origin, { method: 'POST', dispatcher: client(t, { largeBody: 'hash-first', maxBufferedBody: 1024 }, broken.digestInterceptor), body: other }),
    { code: 'EIO' })
  t.ok(other.destroyed)
  t.equal(requests(), 0)
})
