// Issue 18: the interceptor's edges, each over a real socket: every header and body form undici
// takes, HEAD and bodiless statuses, codings it cannot remove, a side decoder that fills up, aborts,
// problem documents that are not digest problems, and the controller a consumer holds across a retry.
import { createHash } from 'node:crypto'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { Readable } from 'node:stream'
import { gzipSync } from 'node:zlib'
import t from 'tap'
import { Agent, request, type Dispatcher } from 'undici'
import { digestInterceptor, DigestProblemError, type DigestInterceptorOptions } from '../../lib/client.js'
import { fuzzSeed, seededBytes, serving, type Tap } from '../helpers.js'

t.comment(`seed ${fuzzSeed} (DIGEST_FUZZ_SEED replays it)`)

const digest = (key: 'sha-256' | 'sha-512', data: string | Buffer): string =>
  `${key}=:${createHash(key === 'sha-256' ? 'sha256' : 'sha512').update(data).digest('base64')}:`

function client (t: Tap, options: DigestInterceptorOptions = {}): Dispatcher {
  const agent = new Agent()
  t.teardown(() => agent.close())
  return agent.compose(digestInterceptor(options))
}

interface Seen { method: string, headers: IncomingMessage['headers'], body: Buffer }

// A server that records each request and answers with `answer`.
async function recording (t: Tap, answer: (seen: Seen, response: ServerResponse) => void): Promise<{ origin: string, seen: Seen[] }> {
  const seen: Seen[] = []
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      const one = { method: request.method as string, headers: request.headers, body: Buffer.concat(chunks) }
      seen.push(one)
      answer(one, response)
    })
  })
  t.teardown(() => { server.closeAllConnections() })
  return { origin: await serving(t, server), seen }
}

const ok = (_seen: Seen, response: ServerResponse): void => { response.end('ok') }

t.test('every body form undici takes is digested as the bytes it sends', async (t) => {
  const { origin, seen } = await recording(t, ok)
  const dispatcher = client(t, { requestDigest: 'repr-digest', want: ['unencoded-digest'] })
  const form = new FormData()
  form.append('name', 'value')
  const bodies: unknown[] = [
    'text', Buffer.from('bytes'), new Uint16Array([1, 2, 3]), new Blob(['a blob']), form,
    ['an ', 'iterable'], Readable.from([Buffer.from('a '), Buffer.from('stream')])
  ]
  for (const body of bodies) {
    const response = await request(origin, { method: 'POST', dispatcher, body: body as string })
    await response.body.dump()
  }
  for (const { headers, body } of seen) {
    t.equal(headers['repr-digest'], digest('sha-256', body), `${body.length} bytes`)
    t.equal(headers['want-unencoded-digest'], 'sha-256=10, sha-512=9')
  }
  t.match(seen[4]?.headers['content-type'], /^multipart\/form-data; boundary=/, 'FormData keeps its boundary')
  t.equal(seen.length, bodies.length)
})

t.test('header fields in every form undici takes are kept, and an application digest is never replaced', async (t) => {
  const { origin, seen } = await recording(t, ok)
  const dispatcher = client(t)
  const mine = 'sha-512=:' + Buffer.alloc(64).toString('base64') + ':'
  for (const headers of [['x-a', '1', 'Content-Digest', mine], [['x-a', '1'], ['content-digest', mine]], { 'X-A': ['1', '2'] }, undefined]) {
    const response = await request(origin, { method: 'POST', dispatcher, headers: headers as string[], body: 'x' })
    await response.body.dump()
  }
  t.same(seen.map(({ headers }) => [headers['x-a'], headers['content-digest']]), [
    ['1', mine], ['1', mine], ['1, 2', digest('sha-256', 'x')], [undefined, digest('sha-256', 'x')]
  ])
  const none = client(t, { requestDigest: false })
  await (await request(origin, { method: 'POST', dispatcher: none, body: 'x' })).body.dump()
  t.equal(seen.at(-1)?.headers['content-digest'], undefined, 'requestDigest false sends none')
})

t.test('a body stream that fails before it is sent fails the request', async (t) => {
  const { origin, seen } = await recording(t, ok)
  const dispatcher = client(t)
  const failing = new Readable({ read () { this.destroy(new Error('the disk went away')) } })
  await t.rejects(request(origin, { method: 'POST', dispatcher, body: failing }), { message: 'the disk went away' })
  t.same(seen, [])
})

t.test('HEAD, 204 and 304 have nothing to check; a 1xx is passed on', async (t) => {
  const { origin } = await recording(t, (seen, response) => {
    const status = Number(seen.headers['x-status'] ?? 200)
    response.writeHead(status, { 'content-digest': digest('sha-256', 'other') }).end(seen.method === 'HEAD' || status !== 200 ? undefined : 'body')
  })
  const dispatcher = client(t, { unverifiable: 'require' })
  for (const [method, status] of [['HEAD', '200'], ['GET', '204'], ['GET', '304']]) {
    const response = await request(origin, { method: method as 'GET', dispatcher, headers: { 'x-status': status } })
    t.equal(await response.body.text(), '', `${method} ${status}`)
  }
})

t.test('Unencoded-Digest: a coding the client cannot remove, a body that does not decode, a decoder that fills up', async (t) => {
  const content = seededBytes(4 * 1024 * 1024, fuzzSeed)
  const gzipped = gzipSync(content, { level: 1 })
  const { origin } = await recording(t, (seen, response) => {
    switch (seen.headers['x-case']) {
      case 'unknown': response.writeHead(200, { 'content-encoding': 'snappy', 'unencoded-digest': digest('sha-256', 'x') }).end('x'); break
      case 'broken': response.writeHead(200, { 'content-encoding': 'gzip', 'unencoded-digest': digest('sha-256', 'x') }).end('not gzip'); break
      case 'short': response.writeHead(200, { 'content-digest': ['md5=:AAAA:', 'sha-256=:AAAA:, sha-512=1'] }).end('x'); break
      case 'none': response.end('x'); break
      default: response.writeHead(200, { 'content-encoding': 'gzip', 'unencoded-digest': [digest('sha-256', content)] }).end(gzipped)
    }
  })
  const lenient = client(t)
  const strict = client(t, { unverifiable: 'require' })
  // A coding the client does not know is ignored unless a digest is required; content that does
  // not decode is refused either way (test/client/coding-errors.test.ts).
  t.equal(await (await request(origin, { dispatcher: lenient, headers: { 'x-case': 'unknown' } })).body.text(), 'x', 'unknown: ignored')
  for (const [name, dispatcher] of [['unknown', strict], ['broken', lenient], ['broken', strict]] as const) {
    const refused = await request(origin, { dispatcher, headers: { 'x-case': name } })
    await t.rejects(refused.body.text(), { name: 'DigestUnverifiableError', message: /Unencoded-Digest cannot be verified/ }, name)
  }
  const short = await request(origin, { dispatcher: strict, headers: { 'x-case': 'short' } })
  await t.rejects(short.body.text(), { message: /content-digest sha-256 is not a digest of its algorithm/ })
  const none = await request(origin, { dispatcher: strict, headers: { 'x-case': 'none' } })
  await t.rejects(none.body.text(), { message: /it has no digest field this client checks/ })
  // The consumer reads slowly: the side decoder's input fills while it waits, and the
  // connection is paused rather than the body queued.
  const slow = await request(origin, { dispatcher: lenient, headers: { 'x-case': 'large' }, highWaterMark: 1024 })
  let received = 0
  for await (const chunk of slow.body) received += (chunk as Buffer).length
  t.equal(received, gzipped.length)
})

t.test('a trailer field naming an algorithm the body was not hashed with cannot be checked', async (t) => {
  const { origin } = await recording(t, (_seen, response) => {
    // Not announced in Trailer: the body is hashed with what the header section named (nothing).
    response.writeHead(200, { 'transfer-encoding': 'chunked' })
    response.write('body')
    response.addTrailers({ 'content-digest': digest('sha-256', 'body') })
    response.end()
  })
  const strict = client(t, { unverifiable: 'require' })
  await t.rejects((await request(origin, { dispatcher: strict })).body.text(), { message: /content-digest sha-256 was not computed/ })
})

t.test('problem documents that are not digest problems, or too long to read for a retry, come back as they were sent', async (t) => {
  const long = JSON.stringify({ type: 'https://example.com/#digest-mismatching-value', detail: 'x'.repeat(70 * 1024) })
  const { origin, seen } = await recording(t, (one, response) => {
    const body = one.headers['x-case'] === 'long' ? long : '{"type":"https://example.com/other","title":"Other"}'
    response.writeHead(400, { 'content-type': 'application/problem+json' }).end(body)
  })
  const dispatcher = client(t)
  for (const name of ['other', 'long']) {
    const response = await request(origin, { method: 'POST', dispatcher, headers: { 'x-case': name }, body: 'x' })
    t.equal(response.statusCode, 400)
    t.equal((await response.body.text()).length, name === 'long' ? long.length : 52, name)
  }
  t.equal(seen.length, 2, 'no retry')
})

t.test('DigestProblemError.from reads only digest problems', async (t) => {
  const problem = { 'content-type': 'application/problem+json; charset=utf-8' }
  t.equal(DigestProblemError.from(400, {}, '{}'), null, 'not a problem document')
  t.equal(DigestProblemError.from(400, problem, 'not json'), null)
  t.equal(DigestProblemError.from(400, problem, 'null'), null)
  t.equal(DigestProblemError.from(400, problem, { type: 7 }), null)
  t.equal(DigestProblemError.from(400, problem, Buffer.from('{"type":"about:blank"}')), null)
  const parsed = DigestProblemError.from(400, { ...problem, 'want-repr-digest': ['sha-256=3', 'sha-512=4'] }, { type: 'x#digest-invalid-values' })
  t.match(parsed, { kind: 'invalid-value', statusCode: 400, want: { 'want-repr-digest': 'sha-256=3, sha-512=4' }, message: 'invalid-value (400)' })
})

t.test('an unsupported-algorithm answer whose Want field offers nothing usable is not retried', async (t) => {
  const answers = ['sha-256=:AAAA:', 'sha-512=0, md5=9', 'sha-512=(1 2)', 'sha-512=?', undefined]
  const { origin, seen } = await recording(t, (one, response) => {
    const want = answers[Number(one.headers['x-case'])]
    response.writeHead(400, { 'content-type': 'application/problem+json', ...(want === undefined ? {} : { 'want-content-digest': want }) })
    response.end('{"type":"https://iana.org/assignments/http-problem-types#digest-unsupported-algorithm"}')
  })
  const dispatcher = client(t)
  for (const i of answers.keys()) {
    t.equal((await request(origin, { method: 'POST', dispatcher, headers: { 'x-case': String(i) }, body: 'x' })).statusCode, 400)
  }
  const none = client(t, { requestDigest: false })
  t.equal((await request(origin, { method: 'POST', dispatcher: none, headers: { 'x-case': '1' }, body: 'x' })).statusCode, 400)
  t.equal(seen.length, answers.length + 1, 'no retry')
})

t.test('header values left out, repeated names, and bodies over maxBufferedBody in several chunks', async (t) => {
  const { origin, seen } = await recording(t, ok)
  const dispatcher = client(t, { maxBufferedBody: 8 })
  const bodies: unknown[] = [new Blob(['a blob over eight bytes']), Readable.from(['first ', 'second ', 'third'])]
  for (const body of bodies) {
    const response = await request(origin, {
      method: 'POST', dispatcher, headers: ['x-a', '1', 'X-A', '2', 'x-b', undefined] as unknown as string[], body: body as string
    })
    await response.body.dump()
  }
  t.same(seen.map(({ headers, body }) => [headers['x-a'], headers['x-b'], headers['content-digest'], body.toString()]), [
    ['1, 2', undefined, undefined, 'a blob over eight bytes'],
    ['1, 2', undefined, undefined, 'first second third']
  ], 'sent whole, without a digest')
})

t.test('the controller a consumer holds: pause, resume and abort reach the current attempt, also across a retry', async (t) => {
  let served = 0
  const { origin } = await recording(t, (_one, response) => {
    if (++served % 2 === 1) {
      response.writeHead(400, { 'content-type': 'application/problem+json' })
      response.end('{"type":"about:blank#digest-mismatching-value"}')
      return
    }
    response.end('second attempt')
  })
  const algorithms: Array<string | null> = []
  let attempts: string[] = []
  const run = async (onRetry: (controller: Dispatcher.DispatchController) => void, options: DigestInterceptorOptions = {}):
  Promise<{ events: string[], body: string }> => {
    let held: Dispatcher.DispatchController | null = null
    const agent = new Agent()
    t.teardown(() => agent.close())
    // Nearer the connection than the interceptor: once each attempt has started (the interceptor's
    // handler has taken its controller), the consumer resumes.
    const resumeOnStart: Dispatcher.DispatcherComposeInterceptor = (dispatch) => (opts, handler) => dispatch(opts, {
      ...handler,
      onRequestStart (controller, context) {
        handler.onRequestStart?.(controller, context)
        attempts.push(controller.paused ? 'paused' : 'running')
        held?.resume()
      },
      onResponseStart: (...args) => handler.onResponseStart?.(...args),
      onResponseData: (...args) => handler.onResponseData?.(...args),
      onResponseEnd: (...args) => handler.onResponseEnd?.(...args),
      onResponseError: (...args) => handler.onResponseError?.(...args)
    })
    const dispatcher = agent.compose(resumeOnStart, digestInterceptor({
      ...options,
      onRetry: ({ algorithm }) => { algorithms.push(algorithm); onRetry(held as Dispatcher.DispatchController) }
    }))
    const events: string[] = []
    let body = ''
    await new Promise<void>((resolve) => {
      dispatcher.dispatch({ origin, path: '/', method: 'POST', body: 'x' }, {
        onRequestStart (controller) {
          held = controller
          events.push(`start paused=${String(controller.paused)} aborted=${String(controller.aborted)}`)
        },
        onResponseStart (_controller, statusCode) { events.push(`status ${statusCode}`) },
        onResponseData (_controller, chunk) { body += chunk.toString() },
        onResponseEnd () { events.push('end'); resolve() },
        onResponseError (controller, error) {
          events.push(`error ${error.message} aborted=${String(controller.aborted)} reason=${controller.reason?.message ?? ''}`)
          resolve()
        }
      })
    })
    return { events, body }
  }
  // Paused between attempts: the next attempt starts paused, until the consumer resumes it.
  const paused = await run((controller) => {
    controller.pause()
    t.equal(controller.paused, true)
  })
  t.same(attempts, ['running', 'paused'], 'the retry started paused')
  attempts = []
  t.same(paused, { events: ['start paused=false aborted=false', 'status 200', 'end'], body: 'second attempt' })
  const undigested = await run(() => {}, { requestDigest: false })
  t.same(undigested.body, 'second attempt')
  t.same(algorithms, ['sha-256', null], 'a retry of a request the interceptor did not digest has no algorithm')
  const aborted = await run((controller) => { controller.abort(new Error('enough')) })
  t.same(aborted, { events: ['start paused=false aborted=false', 'error enough aborted=true reason=enough'], body: '' })
})

t.test('a consumer that aborts mid-body gets the abort, and the next request is checked whole', async (t) => {
  const content = seededBytes(2 * 1024 * 1024, fuzzSeed + 1)
  const { origin } = await recording(t, (_one, response) => {
    response.writeHead(200, { 'content-encoding': 'gzip', 'unencoded-digest': digest('sha-512', content) }).end(gzipSync(content, { level: 1 }))
  })
  const dispatcher = client(t)
  for (let i = 0; i < 20; i++) {
    const abort = new AbortController()
    const response = await request(origin, { dispatcher, signal: abort.signal })
    let read = 0
    const reading = (async () => {
      for await (const chunk of response.body) {
        read += (chunk as Buffer).length
        if (read > 64 * 1024) abort.abort(new Error('seen enough'))
      }
    })()
    await t.rejects(reading, { message: /seen enough|aborted/ })
  }
  const whole = await request(origin, { dispatcher })
  t.equal((await whole.body.arrayBuffer()).byteLength, gzipSync(content, { level: 1 }).length, 'a request after them is checked whole')
})

t.test('CONNECT and upgrades pass through untouched', async (t) => {
  const { origin, seen } = await recording(t, ok)
  const dispatcher = client(t)
  await t.rejects(request(origin, { method: 'CONNECT' as 'GET', dispatcher }))
  await t.rejects(dispatcher.upgrade({ path: '/', protocol: 'websocket' }))
  t.same(seen.map(({ headers }) => headers['content-digest']), [])
})

t.test('a field announced for the trailer section is hashed with what the request asked for', async (t) => {
  const { origin } = await recording(t, (_one, response) => {
    response.writeHead(200, { trailer: 'Content-Digest' })
    response.write('body')
    response.addTrailers({ 'content-digest': digest('sha-512', 'body') })
    response.end()
  })
  const strict = client(t, { unverifiable: 'require' })
  const sha256 = await request(origin, { dispatcher: strict, headers: { 'want-content-digest': 'sha-256=9, sha-512=0' } })
  await t.rejects(sha256.body.text(), { message: /content-digest sha-512 was not computed/ }, 'sha-512 was not asked for')
  const sha512 = await request(origin, { dispatcher: strict, headers: { 'want-content-digest': ['sha-256=1', 'sha-512=5'] } })
  t.equal(await sha512.body.text(), 'body')
})
