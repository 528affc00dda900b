// The interceptor reads a streamed body into memory before it sends it, to digest it. A consumer
// that aborts meanwhile (a body that stalls, a user who gives up) was not heard until the body
// ended, which a stalled body never does: the request hung and held the body. The consumer now holds
// its controller while the body is read; an abort ends the read, lets the body go, and reaches the
// consumer as its error, and nothing is sent. (fetch() rejects on its own abort whatever a dispatcher
// does; the handler case below is what it relies on.)
import { createServer } from 'node:http'
import { Readable } from 'node:stream'
import t from 'tap'
import { Agent, request, type Dispatcher } from 'undici'
import { digestInterceptor } from '../../lib/client.js'
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

function client (t: Tap): Dispatcher {
  const agent = new Agent()
  t.teardown(() => agent.close())
  return agent.compose(digestInterceptor({ largeBody: 'refuse' }))
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

t.test('a stream that errors while it is read reaches the consumer as its error', async (t) => {
  const { origin, requests } = await counting(t)
  const dispatcher = client(t)
  const body = new Readable({ read () { this.destroy(new Error('disk gone')) } })
  await t.rejects(request(origin, { method: 'POST', dispatcher, body }), { message: 'disk gone' })
  t.equal(requests(), 0)
})
