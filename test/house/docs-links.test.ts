// Issue 16: the README and docs/ are read from the npm tarball, where every relative link must name
// a file the tarball holds, and every anchor a heading of that file (GitHub's slugs).
import { execFile } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { dirname, join, normalize } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'

t.setTimeout(120_000)

const root = join(import.meta.dirname, '../..')
const { stdout } = await promisify(execFile)('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root })
const packed = new Set((JSON.parse(stdout) as Array<{ files: Array<{ path: string }> }>)[0]?.files.map(({ path }) => path))
const documents = [...packed].filter((path) => path === 'README.md' || /^docs\/.*\.md$/.test(path))

// GitHub's heading ids: lower case, punctuation but '-' and '_' dropped, spaces to '-'.
function slug (heading: string): string {
  return heading.trim().toLowerCase().replace(/`/g, '').replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-')
}

async function anchorsOf (path: string): Promise<Set<string>> {
  const text = (await readFile(join(root, path), 'utf8')).replace(/^```[\s\S]*?^```/gm, '')
  return new Set([...text.matchAll(/^#{1,6} (.+)$/gm)].map(([, heading]) => slug(heading as string)))
}

t.test('the tarball holds the README, docs/ and the examples', async (t) => {
  t.ok(packed.has('README.md'))
  t.ok(documents.length >= 5, documents.join(', '))
  t.ok(packed.has('examples/upload-server.js'))
  t.ok((await readFile(join(root, 'README.md'))).length <= 16 * 1024, 'the README is at most 16 KB')
})

t.test('every relative link of the README and docs/ resolves in the tarball', async (t) => {
  let links = 0
  for (const document of documents) {
    const text = (await readFile(join(root, document), 'utf8')).replace(/^```[\s\S]*?^```/gm, '')
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(target as string)) continue
      links++
      const [path, anchor] = (target as string).split('#') as [string, string | undefined]
      const file = path === '' ? document : normalize(join(dirname(document), path))
      t.ok(packed.has(file), `${document}: ${target} names ${file}`)
      if (anchor !== undefined && packed.has(file) && file.endsWith('.md')) {
        t.ok((await anchorsOf(file)).has(anchor), `${document}: ${target} names a heading of ${file}`)
      }
    }
  }
  t.ok(links >= 20, `${links} relative links`)
})
