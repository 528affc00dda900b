// The interceptor on an undici 8 Agent (the devDependency `undici8`), whose compose() no longer
// converts handlers of the older shape (onConnect, onHeaders, onData, onComplete, onError) as
// undici 7's did: the built-in fetch of Node 22 and 24 dispatches such a handler, and was never
// called back. undici 8 needs Node 22.19; on an older Node it does not load, and the client entry,
// which loads undici only for the undici package's FormData, still does.
import { createServer, type ServerResponse } from 'node:http'
import { gzipSync } from 'node:zlib'
import t from 'tap'
import { digestInterceptor } from '../../lib/client.js'
import { member, serving, type Tap } from '../helpers.js'

const [major = 0, minor = 0] = process.versions.node.split('.').map(Number)
const supported = major > 22 || (major === 22 && minor >= 19)

const content = Buffer.from('the verified content')

/** Answers `/right` with the content's digest, `/wrong` with another's, `/trailer` with it in a trailer section. */
async function origin (t: Tap): Promise<string> {
  return await serving(t, createServer((request, response: ServerResponse) => {
    if (request.url === '/trailer') {
      response.writeHead(200, { trailer: 'content-digest' })
      response.write(content)
      response.addTrailers({ 'content-digest': member('sha-256', content) })
      response.end()
      return
    }
    response.writeHead(200, { 'content-digest': member('sha-256', request.url === '/wrong' ? 'other' : content) })
    response.end(content)
  }))
}

if (!supported) {
  t.test(`undici 8 does not load on Node ${process.version}, as the README's table says`, async (t) => {
    await t.rejects(import('undici8'))
    t.type(digestInterceptor, 'function', 'while the client entry loaded')
  })
} else {
  const { Agent, request } = await import('undici8')

  t.test('request() through an undici 8 Agent: a verified response passes, a wrong one fails', async (t) => {
    const base = await origin(t)
    const agent = new Agent().compose(digestInterceptor())
    t.teardown(() => agent.close())
    const right = await request(`${base}/right`, { dispatcher: agent })
    t.equal(await right.body.text(), content.toString())
    const wrong = await request(`${base}/wrong`, { dispatcher: agent })
    await t.rejects(wrong.body.text(), { name: 'DigestMismatchError' })
  })

  t.test("undici 8's fetch through the interceptor keeps the response's header section, and decodes its content", async (t) => {
    // undici 8's fetch reads the raw header section from the controller: without it, it saw none
    // (no Content-Type, and a gzip body handed over coded).
    const { fetch: fetch8 } = await import('undici8')
    const original = Buffer.from('a body coded with gzip '.repeat(50))
    const base = await serving(t, createServer((_request, response) => {
      const coded = gzipSync(original)
      response.writeHead(200, { 'content-type': 'text/plain', 'content-encoding': 'gzip', 'unencoded-digest': member('sha-256', original) })
      response.end(coded)
    }))
    const agent = new Agent().compose(digestInterceptor({ unverifiable: 'require' }))
    t.teardown(() => agent.close())
    const fetched = [await fetch8(base, { dispatcher: agent }), await fetch(base, { dispatcher: agent } as unknown as RequestInit)]
    for (const response of fetched) {
      t.equal(response.headers.get('content-type'), 'text/plain')
      t.ok(Buffer.from(await response.arrayBuffer()).equals(original), 'decoded, and its Unencoded-Digest checked')
    }
  })

  t.test(`the built-in fetch of Node ${process.version} through an undici 8 Agent settles, either way`, async (t) => {
    const base = await origin(t)
    const agent = new Agent().compose(digestInterceptor())
    t.teardown(() => agent.close())
    // Node's types of fetch are those of the undici it bundles, not of the undici 8 package.
    const init = { dispatcher: agent } as unknown as RequestInit
    const right = await fetch(`${base}/trailer`, init)
    t.equal(await right.text(), content.toString(), 'a digest in the trailer section checked')
    const wrong = await fetch(`${base}/wrong`, init)
    const error = await wrong.text().then(() => null, (error: Error) => error)
    t.match(error, { name: 'TypeError', cause: { name: 'DigestMismatchError' } }, 'fetch gives the mismatch as the cause of its TypeError')
  })

  t.test('a handler of the older shape is converted: called back with raw sections, paused and resumed', async (t) => {
    const base = await origin(t)
    const agent = new Agent().compose(digestInterceptor())
    t.teardown(() => agent.close())
    const calls: string[] = []
    const chunks: Buffer[] = []
    const { statusCode, headers, trailers } = await new Promise<{ statusCode: number, headers: string[], trailers: string[] }>((resolve, reject) => {
      let head: { statusCode: number, headers: string[] } | null = null
      agent.dispatch({ origin: base, path: '/trailer', method: 'GET' }, {
        onConnect (abort: unknown) { calls.push(`connect ${typeof abort}`) },
        onHeaders (statusCode: number, raw: Buffer[], resume: () => void) {
          head = { statusCode, headers: raw.map(String) }
          // Asks for a pause, which only its resume() lifts.
          setImmediate(resume)
          return false
        },
        onData (chunk: Buffer) { chunks.push(chunk); return true },
        onComplete (raw: Buffer[]) { resolve({ ...(head as { statusCode: number, headers: string[] }), trailers: raw.map(String) }) },
        onError: reject
      } as never)
    })
    t.same(calls, ['connect function'])
    t.equal(statusCode, 200)
    t.ok(headers.includes('trailer'), 'header names and values, a pair each')
    t.equal(Buffer.concat(chunks).toString(), content.toString())
    t.same(trailers, ['content-digest', member('sha-256', content)])
  })

  t.test('a handler of the older shape is told of a mismatch through onError', async (t) => {
    const base = await origin(t)
    const agent = new Agent().compose(digestInterceptor())
    t.teardown(() => agent.close())
    const error = await new Promise<Error>((resolve) => {
      agent.dispatch({ origin: base, path: '/wrong', method: 'GET' }, {
        onConnect: () => {}, onHeaders: () => true, onData: () => true, onComplete: () => resolve(new Error('completed')), onError: resolve
      } as never)
    })
    t.match(error, { name: 'DigestMismatchError' })
  })

  t.test("undici 8's FormData, which this package's undici 7 cannot serialize, goes as it is rather than as its name", async (t) => {
    // Found by the attack on the client: it was sent as the 17 bytes "[object FormData]".
    const { FormData: FormData8 } = await import('undici8')
    let seen = { type: '', body: '' }
    const base = await serving(t, createServer((incoming, response) => {
      let body = ''
      incoming.on('data', (chunk: Buffer) => { body += chunk.toString('latin1') })
      incoming.on('end', () => { seen = { type: String(incoming.headers['content-type']), body }; response.end('ok') })
    }))
    const agent = new Agent().compose(digestInterceptor())
    t.teardown(() => agent.close())
    const form = new FormData8()
    form.append('field', 'a value')
    const response = await request(base, { method: 'POST', body: form, dispatcher: agent })
    t.equal(await response.body.text(), 'ok')
    t.match(seen, { type: /^multipart\/form-data; boundary=/, body: /name="field"\r\n\r\na value/ })
  })

  t.test('a handler of neither shape is refused at once, not left unanswered', async (t) => {
    const agent = new Agent().compose(digestInterceptor())
    t.teardown(() => agent.close())
    t.throws(() => agent.dispatch({ origin: 'http://127.0.0.1:1', path: '/', method: 'GET' }, { onError () {} } as never),
      { code: 'FST_DIGEST_FIELDS_INVALID_OPTION', message: /older shape/ })
  })
}
