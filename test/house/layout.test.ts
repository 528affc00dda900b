// The house of lib/, checked by scripts/layout.js against the table of docs/development.md: the
// repository passes, and a project built to break every rule is told each break.
import { execFileSync, spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import t from 'tap'

const script = join(import.meta.dirname, '../../scripts/layout.js')

t.test('the repository keeps its layout', async (t) => {
  const printed = execFileSync(process.execPath, [script, join(import.meta.dirname, '../..')], { encoding: 'utf8' })
  t.equal(printed, '', 'no finding')
})

t.test('every break of the layout is found, and fails the run', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'layout-'))
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  const write = (path: string, text: string): void => {
    mkdirSync(dirname(join(root, path)), { recursive: true })
    writeFileSync(join(root, path), text)
  }
  write('docs/development.md', readFileSync(join(import.meta.dirname, '../../docs/development.md'), 'utf8'))
  for (const name of ['errors', 'warnings', 'symbols', 'findings', 'types', 'decorations', 'client']) write(`lib/${name}.ts`, '')
  write('lib/index.mts', "export * from './index.js'\n")
  write('lib/client.mts', "export * from './client.js'\n")
  write('lib/index.ts', "import { x } from './client/x.js'\nexport const y = x\n")
  // A CommonJS entry's import-equals counts too.
  write('lib/index.cts', "import client = require('./client.js')\nexport = client\n")
  write('lib/client/x.ts', 'export const x = 1\n')
  // A circle between two places, which also breaks the order of the table.
  write('lib/fields/a.ts', "import { b } from '../request/b.js'\nexport const a = b\n")
  write('lib/request/b.ts', "import type { a } from '../fields/a.js'\nexport const b: typeof a = 1\n")
  // Imports in a type and a re-export count too.
  write('lib/options/o.ts', "export type O = import('../uploads/u.js').U\n")
  write('lib/problems/p.ts', "export { r } from '../response/r.js'\n")
  write('lib/uploads/u.ts', `export type U = number\nexport class Big {\n${'  a = 1\n'.repeat(99)}}\n`)
  write('lib/response/r.ts', `export const r = 1\n${'// a line\n'.repeat(250)}`)
  write('lib/stray.ts', "import { gone } from './gone.js'\nexport const s = gone\n")
  write('lib/more/m.ts', '')
  for (const name of ['one', 'two']) write(`lib/${name}.ts`, '')
  const run = spawnSync(process.execPath, [script, root], { encoding: 'utf8' })
  t.equal(run.status, 1, 'the run fails')
  t.same(run.stdout.trim().split('\n').sort(), [
    'import circle of 2: lib/fields/a.ts, lib/request/b.ts',
    'lib/ has 14 files of its own (at most 12)',
    'lib/index.cts: imports lib/client.ts, but index.cts may not import client.ts',
    'lib/fields/a.ts: imports lib/request/b.ts, but fields/ may not import request/',
    'lib/index.ts: imports lib/client/x.ts, but index.ts, decorations.ts may not import client/',
    'lib/more/m.ts: more/ is not in the layout table of docs/development.md',
    'lib/one.ts: one.ts is not in the layout table of docs/development.md',
    'lib/options/o.ts: imports lib/uploads/u.ts, but options/ may not import uploads/',
    'lib/problems/p.ts: imports lib/response/r.ts, but problems/ may not import response/',
    'lib/response/r.ts: 251 lines (at most 250)',
    'lib/stray.ts: imports ./gone.js, which is no file of lib/',
    'lib/stray.ts: stray.ts is not in the layout table of docs/development.md',
    'lib/two.ts: two.ts is not in the layout table of docs/development.md',
    'lib/uploads/u.ts: class Big of 101 lines (at most 100)'
  ].sort())
})
