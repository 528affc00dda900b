// Handlers of undici's older shape (onConnect, onHeaders, onData, onComplete, onError), converted by
// the interceptor since undici 8's compose() no longer does (test/client/undici-8.test.ts has the
// undici 8 Agent): here through the interceptor on an undici 7 Agent without its compose(), on
// every Node, and method by method against a recording controller.
import { createServer, type ServerResponse } from 'node:http'
import t from 'tap'
import { Agent, type Dispatcher } from 'undici'
import { digestInterceptor } from '../../lib/client.js'
import { currentHandler } from '../../lib/client/legacy-handler.js'
import { Relay } from '../../lib/client/relay.js'
import { member, serving } from '../helpers.js'

const content = Buffer.from('content of the older shape')

t.test('over a socket: an older handler gets raw sections, its pause is kept until it resumes, a mismatch reaches onError', async (t) => {
  const origin = await serving(t, createServer((request, response: ServerResponse) => {
    response.writeHead(200, { trailer: 'content-digest', 'set-cookie': ['a=1', 'b=2'] })
    response.write(content)
    response.addTrailers({ 'content-digest': member('sha-256', request.url === '/wrong' ? 'other' : content) })
    response.end()
  }))
  const agent = new Agent()
  t.teardown(() => agent.close())
  // The interceptor without compose(), which in undici 7 would convert the handler before it.
  const dispatch = digestInterceptor()(agent.dispatch.bind(agent) as never) as (options: object, handler: object) => boolean
  const send = async (path: string): Promise<{ head: string[], chunks: Buffer[], trailers: string[] | null, error: Error | null }> =>
    await new Promise((resolve) => {
      const got = { head: [] as string[], chunks: [] as Buffer[], trailers: null as string[] | null, error: null as Error | null }
      dispatch({ origin, path, method: 'GET' }, {
        onConnect () {},
        onHeaders (_status: number, raw: Buffer[], resume: () => void) {
          got.head = raw.map(String)
          setImmediate(resume)
          return false
        },
        onData (chunk: Buffer) { got.chunks.push(chunk); return true },
        onComplete (raw: Buffer[]) { got.trailers = raw.map(String); resolve(got) },
        onError (error: Error) { got.error = error; resolve(got) }
      })
    })
  const right = await send('/right')
  t.equal(right.error, null)
  t.same(right.head.filter((_, i) => right.head[i - 1] === 'set-cookie'), ['a=1', 'b=2'], 'a field of two values, a pair each')
  t.equal(Buffer.concat(right.chunks).toString(), content.toString())
  t.same(right.trailers, ['content-digest', member('sha-256', content)])
  const wrong = await send('/wrong')
  t.match(wrong.error, { name: 'DigestMismatchError' })
  t.equal(wrong.trailers, null, 'never completed')
})

/** A controller that records what is asked of it. */
function recorder (): Dispatcher.DispatchController & { calls: string[] } {
  const calls: string[] = []
  return {
    calls,
    aborted: false,
    paused: false,
    reason: null,
    abort (reason: Error) { calls.push(`abort ${reason.message}`) },
    pause () { calls.push('pause') },
    resume () { calls.push('resume') }
  }
}

t.test('each method of the converted handler calls its older one', async (t) => {
  const controller = recorder()
  const seen: unknown[] = []
  const older = {
    onConnect (abort: (reason?: Error) => void, context: unknown) { seen.push(['connect', context]); abort(); abort(new Error('why')) },
    onUpgrade (status: number, raw: Buffer[]) { seen.push(['upgrade', status, raw.map(String)]) },
    onHeaders (status: number, raw: Buffer[], resume: () => void, text: string) { seen.push(['headers', status, raw.map(String), text]); resume(); return false },
    onData (chunk: Buffer) { seen.push(['data', String(chunk)]); return false },
    onComplete (raw: Buffer[]) { seen.push(['complete', raw.map(String)]) },
    onError (error: Error) { seen.push(['error', error.message]) }
  }
  const handler = currentHandler(older as never, 'request')
  handler.onRequestStart?.(controller, { context: 1 })
  handler.onResponseStart?.(controller, 200, { a: ['1', '2'], gone: undefined })
  handler.onResponseData?.(controller, Buffer.from('x'))
  handler.onResponseEnd?.(controller, {})
  handler.onResponseError?.(controller, new Error('failed'))
  currentHandler(older as never, 'upgrade').onRequestUpgrade?.(controller, 101, { upgrade: 'websocket' }, null as never)
  t.same(seen, [
    ['connect', { context: 1 }],
    ['headers', 200, ['a', '1', 'a', '2'], ''],
    ['data', 'x'],
    ['complete', []],
    ['error', 'failed'],
    ['upgrade', 101, ['upgrade', 'websocket']]
  ])
  t.same(controller.calls, ['abort aborted', 'abort why', 'resume', 'pause', 'pause'])
  // A handler that goes on gets no pause.
  const going = recorder()
  const goes = currentHandler({ ...older, onHeaders: () => true, onData: () => true } as never, 'request')
  goes.onResponseStart?.(going, 200, {}, 'OK')
  goes.onResponseData?.(going, Buffer.from('x'))
  t.same(going.calls, [])
})

t.test('handlers of the current shape are used as they are; a handler of neither shape whole is refused', async (t) => {
  const noop = (): void => {}
  const current = { onResponseStart: noop, onResponseData: noop, onResponseEnd: noop, onResponseError: noop }
  t.equal(currentHandler(current as never, 'request'), current)
  const upgrade = { onRequestUpgrade: noop, onResponseError: noop }
  t.equal(currentHandler(upgrade as never, 'upgrade'), upgrade, 'one for an upgrade')
  // As undici refuses them: a part of either shape would leave the request unanswered.
  for (const neither of [{}, null, { onError: noop }, { onResponseError: noop }, { onHeaders: noop, onData: noop, onComplete: noop, onError: noop }, upgrade]) {
    t.throws(() => currentHandler(neither as never, 'request'), { code: 'FST_DIGEST_FIELDS_INVALID_OPTION', message: /older shape/ })
  }
  t.throws(() => currentHandler(current as never, 'upgrade'), { code: 'FST_DIGEST_FIELDS_INVALID_OPTION' }, 'an upgrade needs onRequestUpgrade or onUpgrade')
})

t.test("the consumer's controller gives the raw header section undici 8's fetch reads: the attempt's, or one made from the headers handed on", async (t) => {
  const relay = new Relay()
  relay.handedOn({ 'content-type': 'text/plain', 'set-cookie': ['a=1', 'b=2'] })
  t.same((relay.rawHeaders as Buffer[]).map(String), ['content-type', 'text/plain', 'set-cookie', 'a=1', 'set-cookie', 'b=2'], 'before any attempt, or from a controller without one')
  const upstream = { ...recorder(), rawHeaders: [Buffer.from('x-raw'), Buffer.from('1')] }
  relay.attach(upstream)
  t.equal(relay.rawHeaders, upstream.rawHeaders, "the attempt's own")
})
