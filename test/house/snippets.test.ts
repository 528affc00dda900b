// Issue 16: every snippet of the README and docs/ runs as written. JavaScript runs as a program
// (its server started on a free port); TypeScript compiles under nodenext; shell runs
// with the example server on 127.0.0.1:3000, as the README says to start it. npm commands are what
// CI itself runs, and json/text/http blocks are shown output.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import t from 'tap'

t.setTimeout(120_000)

const root = join(import.meta.dirname, '../..')
const documents = ['README.md', ...(await readdir(join(root, 'docs'))).filter((name) => name.endsWith('.md')).map((name) => `docs/${name}`)]

interface Snippet { readonly where: string, readonly lang: string, readonly code: string }

const snippets: Snippet[] = []
for (const document of documents) {
  const lines = (await readFile(join(root, document), 'utf8')).split('\n')
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\w*)\s*$/.exec(lines[i] as string)
    if (open === null) continue
    const end = lines.indexOf('```', i + 1)
    snippets.push({ where: `${document}:${i + 1}`, lang: open[1] as string, code: lines.slice(i + 1, end).join('\n') + '\n' })
    i = end
  }
}

const shown = new Set(['json', 'text', 'http'])
const npmOnly = (code: string): boolean => code.split('\n').every((line) => line.trim() === '' || /^npm (install|start|test|run)\b/.test(line))

// Every block is of a kind this test knows, so a new kind cannot slip through unchecked.
t.test('every snippet is of a kind that is run or shown', async (t) => {
  for (const { where, lang } of snippets) t.ok(['js', 'ts', 'sh', ...shown].includes(lang), `${where}: \`\`\`${lang}`)
  t.ok(snippets.filter(({ lang }) => lang === 'js').length >= 5, 'the recipes are there')
})

// Snippets are written inside the repository, so that 'fastify-digest-fields' resolves to this
// package (a self-reference through its exports) and its devDependencies are found.
const scratch = join(root, '.snippets')
await rm(scratch, { recursive: true, force: true })
await mkdir(scratch)
t.teardown(() => rm(scratch, { recursive: true, force: true }))
// The folders snippets and the example server make in the temporary directory go with the scratch folder.
const temporary = join(scratch, 'tmp')
await mkdir(temporary)

async function run (command: string, args: string[], options: { cwd: string, env?: NodeJS.ProcessEnv }): Promise<{ code: number | null, output: string }> {
  const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => { output += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { output += chunk.toString() })
  const [code] = await once(child, 'close') as [number | null]
  return { code, output }
}

const fileName = (where: string): string => where.replace(/[/:.]/g, '-')

t.test('every JavaScript snippet runs as written', async (t) => {
  const preload = join(root, 'test', 'fixtures', 'snippet-preload.mjs')
  for (const { where, code } of snippets.filter(({ lang }) => lang === 'js')) {
    const commonJs = /\brequire\(/.test(code) && !/^import /m.test(code)
    const file = join(scratch, fileName(where) + (commonJs ? '.cjs' : '.mjs'))
    await writeFile(file, code)
    const { code: exit, output } = await run(process.execPath, ['--import', preload, file], { cwd: scratch, env: { ...process.env, TMPDIR: temporary } })
    t.equal(exit, 0, `${where}\n${output}`)
    if (code.includes('.listen(')) t.match(output, /snippet listened at http:\/\/127\.0\.0\.1:\d+/, `${where}: its server started`)
  }
})

t.test('every TypeScript snippet compiles under nodenext with TypeScript 6', async (t) => {
  const typescript = snippets.filter(({ lang }) => lang === 'ts')
  const folder = join(scratch, 'ts')
  await mkdir(folder)
  for (const { where, code } of typescript) await writeFile(join(folder, fileName(where) + '.mts'), code)
  await writeFile(join(folder, 'tsconfig.json'), JSON.stringify({
    compilerOptions: { module: 'nodenext', target: 'es2022', strict: true, noEmit: true, skipLibCheck: true, types: ['node'] },
    include: ['*.mts']
  }))
  const { code, output } = await run(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', folder], { cwd: folder })
  t.equal(code, 0, output)
  t.ok(typescript.length >= 1, typescript.map(({ where }) => where).join(', '))
})

t.test('every shell snippet runs against the example server as `npm start` serves it', async (t) => {
  const server = spawn(process.execPath, [join(root, 'examples', 'upload-server.js')], { cwd: root, env: { ...process.env, PORT: '3000', TMPDIR: temporary }, stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { server.kill() })
  let listening = false
  for await (const line of createInterface({ input: server.stdout })) {
    listening = line.includes('Server listening at http://127.0.0.1:3000')
    if (listening) break
  }
  // Its request log keeps coming: drained, so that the server never waits on a full pipe.
  server.stdout.resume()
  t.ok(listening, 'the example server listens on 127.0.0.1:3000 (a port nothing else may hold)')
  if (!listening) return
  const folder = await mkdtemp(join(tmpdir(), 'digest-snippets-'))
  t.teardown(() => rm(folder, { recursive: true, force: true }))
  const shell = snippets.filter(({ lang, code }) => lang === 'sh' && !npmOnly(code))
  for (const { where, code } of shell) {
    const { code: exit, output } = await run('bash', ['-e', '-o', 'pipefail', '-c', code], { cwd: folder })
    t.equal(exit, 0, `${where}\n${output}`)
  }
  t.ok(shell.length >= 1, shell.map(({ where }) => where).join(', '))
})
