// The independent conformance suite for draft-ietf-httpbis-resumable-upload
// (test/fixtures/resumable-conformance, written from the draft's text alone) checked against its
// author's own toy server: a correct toy passes every check, and a bug switched on fails the checks
// aimed at it, so that a pass of the suite means something.
import { execFile, spawn } from 'node:child_process'
import { once } from 'node:events'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { promisify } from 'node:util'
import t from 'tap'
import type { Tap } from '../helpers.js'

const folder = join(import.meta.dirname, '../fixtures/resumable-conformance')
const run = promisify(execFile)

t.setTimeout(180_000)

interface Report { summary: { fail: number }, results: Array<{ id: string, status: string }> }

async function suiteAgainstToy (t: Tap, bugs: string, limits = '', only: string[] = []): Promise<string[]> {
  const toy = spawn(process.execPath, ['toy-server.mjs'], {
    cwd: folder, env: { ...process.env, PORT: '0', TOY_BUGS: bugs, TOY_LIMITS: limits }, stdio: ['ignore', 'pipe', 'inherit']
  })
  t.teardown(() => { toy.kill() })
  const [line] = await once(createInterface({ input: toy.stdout }), 'line') as [string]
  const origin = (/http:\/\/127\.0\.0\.1:\d+/.exec(line) as RegExpExecArray)[0]
  const { stdout } = await run(process.execPath, ['resumable-conformance.mjs', origin, '--json', ...(only.length === 0 ? [] : ['--only', only.join(',')])], { cwd: folder }).catch((error: { stdout: string }) => error)
  const report = JSON.parse(stdout) as Report
  return report.results.filter(({ status }) => status === 'not ok').map(({ id }) => id)
}


t.test('a correct server passes every check, with limits and without', async (t) => {
  t.same(await suiteAgainstToy(t, ''), [])
  t.same(await suiteAgainstToy(t, '', 'max-size=100000,max-append-size=4096,min-append-size=4,max-age=3600,min-size=10'), [])
})

t.test('a bug fails the checks aimed at it', async (t) => {
  for (const [bug, aimed] of [
    ['no409', ['append-offset-ahead', 'append-offset-behind']],
    ['noInconsistent', ['length-inconsistent-creation', 'length-inconsistent-append', 'length-complete-mismatch']],
    ['always104', ['i104-not-sent-without-version', 'i104-not-sent-other-version', 'i104-not-sent-append-without-version']]
  ] as const) {
    t.same(await suiteAgainstToy(t, bug, '', [...aimed]), aimed, bug)
  }
})
