// The independent conformance suite for draft-ietf-httpbis-resumable-upload
// (test/fixtures/resumable-conformance, written from the draft's text alone): against its author's
// own toy server, a correct toy passes every check and a bug switched on fails the checks aimed at
// it, so that a pass of the suite means something; then against the example server, which passes
// every check but one SHOULD that docs/resumable-uploads.md explains, with the 104 checks wherever
// this Node can send a 104.
import { execFile } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { ServerResponse } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { serverProcess, type Tap } from '../helpers.js'

const folder = join(import.meta.dirname, '../fixtures/resumable-conformance')
const run = promisify(execFile)

t.setTimeout(180_000)

interface Report { summary: { fail: number }, results: Array<{ id: string, status: string }> }

/** The ids of the checks that failed against the server at `origin`. */
async function failedChecks (origin: string, args: string[]): Promise<string[]> {
  const { stdout } = await run(process.execPath, ['resumable-conformance.mjs', origin, '--json', ...args], { cwd: folder })
    .catch((error: { stdout: string }) => error)
  const report = JSON.parse(stdout) as Report
  return report.results.filter(({ status }) => status === 'not ok').map(({ id }) => id)
}

/** Starts a server and waits for the first line it prints that names its origin. */
async function serve (t: Tap, args: string[], env: Record<string, string>, cwd: string): Promise<string> {
  return (await serverProcess(t, args, env, cwd)).origin
}

async function suiteAgainstToy (t: Tap, bugs: string, limits = '', only: string[] = []): Promise<string[]> {
  const origin = await serve(t, ['toy-server.mjs'], { TOY_BUGS: bugs, TOY_LIMITS: limits }, folder)
  return await failedChecks(origin, only.length === 0 ? [] : ['--only', only.join(',')])
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

t.test('the example server passes every check', async (t) => {
  const uploads = await mkdtemp(join(tmpdir(), 'conformance-uploads-'))
  t.teardown(() => rm(uploads, { recursive: true, force: true }))
  const origin = await serve(t, [join(import.meta.dirname, '../../examples/resumable-upload-server.js')], { UPLOAD_DIR: uploads }, join(import.meta.dirname, '../..'))
  // Where this Node cannot send a 104, the check that one is sent is left out; the checks that
  // none goes to a client of another interop version run everywhere.
  const sends104 = typeof (ServerResponse.prototype as { writeInformation?: unknown }).writeInformation === 'function'
  t.same(await failedChecks(`${origin}`, ['--interop-version', '9', ...(sends104 ? [] : ['--no-104'])]), [])
})

t.test('curl sees the 104 where Node can send one, to a client of interop version 9 only', async (t) => {
  const uploads = await mkdtemp(join(tmpdir(), 'conformance-uploads-'))
  t.teardown(() => rm(uploads, { recursive: true, force: true }))
  const origin = await serve(t, [join(import.meta.dirname, '../../examples/resumable-upload-server.js')], { UPLOAD_DIR: uploads }, join(import.meta.dirname, '../..'))
  const sends104 = typeof (ServerResponse.prototype as { writeInformation?: unknown }).writeInformation === 'function'
  const interims = async (version: string): Promise<string[]> => {
    const { stderr } = await run('curl', ['-sv', '-o', '/dev/null', '-X', 'POST', '-H', `Upload-Draft-Interop-Version: ${version}`,
      '-H', 'Upload-Complete: ?1', '--data-binary', 'hello', `${origin}/resumable`])
    // curl's verbose lines of what the server sent, of every response before the final one.
    const lines = stderr.split('\n').filter((line) => line.startsWith('< ')).map((line) => line.slice(2).trim().toLowerCase())
    const final = lines.findIndex((line) => /^http\/1\.1 200/.test(line))
    t.ok(final >= 0, 'a final 200')
    return lines.slice(0, final).filter((line) => line !== '')
  }
  const announced = await interims('9')
  if (sends104) {
    t.match(announced[0], /^http\/1\.1 104/, `Node ${process.version} sends a 104`)
    t.ok(announced.some((line) => /^location: \/resumable\/[0-9a-f]{32}$/.test(line)), 'with the upload\'s Location')
    t.ok(announced.includes('upload-draft-interop-version: 9') && announced.includes('upload-limit: min-size=0'))
  } else {
    t.same(announced, [], `Node ${process.version} sends none`)
  }
  t.same(await interims('8'), [], 'none to a client of another interop version')
})
