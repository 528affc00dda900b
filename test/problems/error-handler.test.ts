import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { hello, json, member, problemTypes, type Tap } from '../helpers.js'

const mismatch = { ...json, 'content-digest': member('sha-256', 'x') }

interface Seen { errors: string[], warnings: string[] }

function watchWarnings (t: Tap): string[] {
  const warnings: string[] = []
  const onWarning = (warning: Error & { code?: string }): void => { warnings.push(warning.code ?? warning.message) }
  process.on('warning', onWarning)
  t.teardown(() => { process.off('warning', onWarning) })
  return warnings
}

async function check (t: Tap, app: FastifyInstance, seen: Seen): Promise<void> {
  app.post('/', async () => { throw Object.assign(new Error('teapot'), { statusCode: 418 }) })
  const problem = await app.inject({ method: 'POST', url: '/', payload: hello, headers: mismatch })
  t.equal(problem.statusCode, 400)
  t.equal(problem.headers['content-type'], 'application/problem+json')
  t.equal(problem.json().type, problemTypes + 'digest-mismatching-value')

  const other = await app.inject({ method: 'POST', url: '/', payload: hello, headers: json })
  t.equal(other.statusCode, 418)
  t.same(other.json(), { handledBy: 'application', message: 'teapot' })
  t.same(seen.errors, ['teapot'], 'the application handler saw the other error and no problem')
  // Warnings are emitted on the next tick.
  await new Promise((resolve) => setImmediate(resolve))
  t.notOk(seen.warnings.includes('FSTWRN004'))
}

function appHandler (seen: Seen) {
  return (error: Error, _request: unknown, reply: import('fastify').FastifyReply) => {
    seen.errors.push(error.message)
    reply.code(418).send({ handledBy: 'application', message: error.message })
  }
}

for (const allowErrorHandlerOverride of [true, false]) {
  t.test(`the application sets its error handler before registering (allowErrorHandlerOverride: ${allowErrorHandlerOverride})`, async (t) => {
    const seen = { errors: [], warnings: watchWarnings(t) }
    const app = Fastify({ allowErrorHandlerOverride })
    app.setErrorHandler(appHandler(seen))
    await app.register(fastifyDigestFields)
    await check(t, app, seen)
  })

  t.test(`the application sets its error handler after registering (allowErrorHandlerOverride: ${allowErrorHandlerOverride})`, async (t) => {
    const seen = { errors: [], warnings: watchWarnings(t) }
    const app = Fastify({ allowErrorHandlerOverride })
    await app.register(fastifyDigestFields)
    app.setErrorHandler(appHandler(seen))
    await check(t, app, seen)
  })
}

t.test('a route-level error handler keeps receiving the errors that are not digest problems', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  const seen: string[] = []
  app.post('/', {
    errorHandler: (error, _request, reply) => {
      seen.push(error.message)
      reply.code(409).send({ route: true })
    }
  }, async () => { throw new Error('conflict') })
  const problem = await app.inject({ method: 'POST', url: '/', payload: hello, headers: mismatch })
  t.equal(problem.json().type, problemTypes + 'digest-mismatching-value')
  const other = await app.inject({ method: 'POST', url: '/', payload: hello, headers: json })
  t.equal(other.statusCode, 409)
  t.same(seen, ['conflict'])
})

t.test('Fastify errors keep their own status, not a digest problem', async (t) => {
  const app = Fastify({ bodyLimit: 10 })
  await app.register(fastifyDigestFields)
  app.post('/', async () => 'ok')
  const tooLarge = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': member('sha-256', hello) } })
  t.equal(tooLarge.statusCode, 413)
  t.equal(tooLarge.json().code, 'FST_ERR_CTP_BODY_TOO_LARGE')
  const badJson = await app.inject({ method: 'POST', url: '/', payload: '{', headers: { ...json, 'content-digest': member('sha-256', '{') } })
  t.equal(badJson.statusCode, 400)
  t.equal(badJson.headers['content-type'], 'application/json; charset=utf-8')
  t.equal(badJson.json().code, 'FST_ERR_CTP_INVALID_JSON_BODY')
})

function logLines (): { lines: Array<Record<string, unknown>>, stream: { write: (line: string) => void } } {
  const lines: Array<Record<string, unknown>> = []
  return { lines, stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } }
}

t.test('logs each problem once, at info level, with its type, fields and algorithms', async (t) => {
  const { lines, stream } = logLines()
  const app = Fastify({ logger: { level: 'info', stream } })
  await app.register(fastifyDigestFields, { disclosure: 'none' })
  app.post('/', async () => 'ok')
  const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: mismatch })
  t.equal(response.json().type, 'about:blank')
  const problems = lines.filter((line) => 'problemType' in line)
  t.equal(problems.length, 1)
  t.equal(problems[0]?.level, 30)
  // The log keeps what the response withholds.
  t.equal(problems[0]?.problemType, problemTypes + 'digest-mismatching-value')
  t.same(problems[0]?.digestFields, [{ field: 'Content-Digest', algorithm: 'sha-256' }])
  t.equal(problems[0]?.msg, 'Mismatching Digest Value: Content-Digest sha-256')
  t.notOk(lines.some((line) => (line.level as number) >= 40), 'nothing else logged a warning or an error')
})

t.test('the log line names every field and algorithm found, and never a digest value', async (t) => {
  const { lines, stream } = logLines()
  const app = Fastify({ logger: { level: 'info', stream } })
  await app.register(fastifyDigestFields)
  app.post('/', async () => 'ok')
  const provided = [member('sha-256', 'x'), member('sha-512', 'x')]
  const response = await app.inject({
    method: 'POST',
    url: '/',
    payload: hello,
    headers: { ...json, 'content-digest': provided.join(', '), 'repr-digest': provided[1] }
  })
  t.equal(response.statusCode, 400)
  const [line] = lines.filter((line) => 'problemType' in line)
  t.same(line?.digestFields, [
    { field: 'Content-Digest', algorithm: 'sha-256' },
    { field: 'Content-Digest', algorithm: 'sha-512' },
    { field: 'Repr-Digest', algorithm: 'sha-512' }
  ])
  const logged = JSON.stringify(lines)
  for (const value of [...provided.map((field) => field.split('=:')[1]?.slice(0, -1)), response.json()['calculated-digest'].slice(1, -1)]) {
    t.notOk(logged.includes(value as string), `no digest value in the log: ${String(value)}`)
  }
})

t.test('problemLogLevel sets the level of the log line, per route', async (t) => {
  const { lines, stream } = logLines()
  const app = Fastify({ logger: { level: 'debug', stream } })
  await app.register(fastifyDigestFields, { problemLogLevel: 'warn' })
  app.post('/warn', async () => 'ok')
  app.post('/debug', { config: { digest: { problemLogLevel: 'debug' } } }, async () => 'ok')
  app.post('/silent', { config: { digest: { problemLogLevel: 'silent' } } }, async () => 'ok')
  for (const url of ['/warn', '/debug', '/silent']) {
    t.equal((await app.inject({ method: 'POST', url, payload: hello, headers: mismatch })).statusCode, 400, url)
  }
  t.same(lines.filter((line) => 'problemType' in line).map((line) => line.level), [40, 20], 'warn, debug, and nothing for silent')
})

t.test('a silent problem log line is not written to a disabled logger either', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields, { problemLogLevel: 'silent' })
  app.post('/', async () => 'ok')
  t.equal((await app.inject({ method: 'POST', url: '/', payload: hello, headers: mismatch })).statusCode, 400)
})
