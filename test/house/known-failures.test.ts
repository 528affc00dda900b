// .ci/known-failures.js, which lets the Fastify 6 run of CI fail only where .ci/fastify-6.json names
// a fault of Fastify's: it reads each failed subtest of a TAP log, and fails on any it does not list.
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import t from 'tap'

const script = join(import.meta.dirname, '../../.ci/known-failures.js')
const { failuresOf } = await import(pathToFileURL(script).href) as { failuresOf: (tap: string) => string[] }
const log = [
  '# Subtest: test/a.test.ts',
  '    # Subtest: passes',
  '    ok 1 - passes # time=1ms',
  '    # Subtest: fails with a trailer',
  '        not ok 1 - should be equal',
  '    not ok 2 - fails with a trailer # time=2.5ms',
  'not ok 1 - test/a.test.ts # time=10ms',
  '# Subtest: test/b.test.ts',
  '    1..0 # no tests found',
  'not ok 2 - test/b.test.ts # time=3ms',
  '# Subtest: test/c.test.ts',
  'ok 3 - test/c.test.ts # time=3ms',
  'not ok 4 - timeout!',
  '  ---',
  '  expired: test/c.test.ts',
  '  ...'
].join('\n')

t.test('each failed subtest is read once, a file that failed bare and a timeout by the file', async (t) => {
  t.same(failuresOf(log), ['test/a.test.ts » fails with a trailer', 'test/b.test.ts', 'test/c.test.ts » timeout'])
})

t.test('the run fails on an unlisted failure, and names a listed one that passed', async (t) => {
  const folder = mkdtempSync(join(tmpdir(), 'known-failures-'))
  t.teardown(() => rmSync(folder, { recursive: true, force: true }))
  writeFileSync(join(folder, 'log'), log)
  const check = (failures: string[]): ReturnType<typeof spawnSync> => {
    writeFileSync(join(folder, 'list.json'), JSON.stringify({ causes: { bug: 'a bug of theirs' }, failures: failures.map((test) => ({ test, cause: 'bug' })) }))
    return spawnSync(process.execPath, [script, join(folder, 'log'), join(folder, 'list.json')], { encoding: 'utf8' })
  }
  const all = check(['test/a.test.ts » fails with a trailer', 'test/b.test.ts', 'test/c.test.ts » timeout', 'test/d.test.ts » fixed'])
  t.equal(all.status, 0)
  t.match(all.stdout, '# known failure: test/b.test.ts\n#   a bug of theirs')
  t.match(all.stdout, '# listed failure that passed: test/d.test.ts » fixed')
  const some = check(['test/b.test.ts'])
  t.equal(some.status, 1)
  t.match(some.stdout, '# UNLISTED FAILURE: test/a.test.ts » fails with a trailer')
  t.match(some.stdout, '# UNLISTED FAILURE: test/c.test.ts » timeout')
})
