// Checks the house of lib/ against the layout table of docs/development.md, so that it cannot drift
// back unseen: every file in a place the table names; imports (type-only ones included) only into
// the places its row lists; no import circle; at most a dozen files directly in lib/; no file over
// 250 lines nor class over 100. Prints one finding a line and exits 1, or prints nothing.
// Usage: node scripts/layout.js [project folder]
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import ts from 'typescript'

const limits = { topFiles: 12, fileLines: 250, classLines: 100 }

/** The rows of the table under "## Layout": places (folders end in /), what each may import. */
export function readLayout (markdown) {
  const section = markdown.split(/^## /m).find((part) => part.startsWith('Layout'))
  if (section === undefined) throw new Error('docs/development.md has no "## Layout" section')
  const names = (cell) => [...cell.matchAll(/`([^`]+)`/g)].map((match) => match[1])
  const rows = section.split('\n')
    .filter((line) => line.startsWith('| `'))
    .map((line) => line.split('|').slice(1, -1))
    .map(([places, owns, imports]) => ({ places: names(places), owns: owns.trim(), imports }))
  const catalogues = rows.find((row) => row.owns.startsWith('catalogues'))?.places ?? []
  return rows.map(({ places, imports }) => ({
    places,
    allowed: [...names(imports), ...(/\bcatalogues\b/.test(imports) ? catalogues : [])]
  }))
}

function sourceFiles (folder) {
  return readdirSync(folder).flatMap((name) => {
    const path = join(folder, name)
    return statSync(path).isDirectory() ? sourceFiles(path) : /\.[cm]?ts$/.test(name) ? [path] : []
  })
}

/** The place a file of lib/ is in: its folder (`request/`), or its own name when directly in lib/. */
function placeOf (file) {
  const [first, second] = file.split('/')
  return second === undefined ? first : `${first}/`
}

/** Relative module specifiers a file imports or re-exports, in statements and in types. */
function specifiersOf (source) {
  const found = []
  const visit = (node) => {
    const specifier = ts.isImportDeclaration(node) || ts.isExportDeclaration(node)
      ? node.moduleSpecifier
      : ts.isExternalModuleReference(node)
        ? node.expression
        : ts.isImportTypeNode(node)
          ? node.argument.literal
          : ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword ? node.arguments[0] : undefined
    if (specifier !== undefined && ts.isStringLiteral(specifier) && specifier.text.startsWith('.')) found.push(specifier.text)
    ts.forEachChild(node, visit)
  }
  visit(source)
  return found
}

function classesOf (source) {
  const found = []
  const visit = (node) => {
    if (ts.isClassDeclaration(node) || ts.isClassExpression(node)) {
      const lines = source.getLineAndCharacterOfPosition(node.end).line -
        source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1
      found.push({ name: node.name?.text ?? '(anonymous)', lines })
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
  return found
}

/** The import circles of a graph (Tarjan's strongly connected components of more than one file). */
function circlesOf (graph) {
  const index = new Map()
  const low = new Map()
  const stack = []
  const circles = []
  const connect = (file) => {
    index.set(file, index.size)
    low.set(file, index.get(file))
    stack.push(file)
    for (const next of graph.get(file)) {
      if (!index.has(next)) {
        connect(next)
        low.set(file, Math.min(low.get(file), low.get(next)))
      } else if (stack.includes(next)) {
        low.set(file, Math.min(low.get(file), index.get(next)))
      }
    }
    if (low.get(file) === index.get(file)) {
      const circle = stack.splice(stack.indexOf(file))
      if (circle.length > 1 || graph.get(file).includes(file)) circles.push(circle.sort())
    }
  }
  for (const file of graph.keys()) if (!index.has(file)) connect(file)
  return circles
}

/** The findings of the house of the project in `root`, one a line. */
export function checkLayout (root) {
  const findings = []
  const layout = readLayout(readFileSync(join(root, 'docs/development.md'), 'utf8'))
  const rowOf = new Map(layout.flatMap((row) => row.places.map((place) => [place, row])))
  const lib = join(root, 'lib')
  const files = sourceFiles(lib).map((path) => relative(lib, path)).sort()
  const graph = new Map(files.map((file) => [file, []]))
  const top = files.filter((file) => !file.includes('/'))
  if (top.length > limits.topFiles) findings.push(`lib/ has ${top.length} files of its own (at most ${limits.topFiles})`)
  for (const file of files) {
    const text = readFileSync(join(lib, file), 'utf8')
    const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true)
    const lines = source.getLineAndCharacterOfPosition(text.trimEnd().length).line + 1
    if (lines > limits.fileLines) findings.push(`lib/${file}: ${lines} lines (at most ${limits.fileLines})`)
    for (const { name, lines } of classesOf(source)) {
      if (lines > limits.classLines) findings.push(`lib/${file}: class ${name} of ${lines} lines (at most ${limits.classLines})`)
    }
    const place = placeOf(file)
    const row = rowOf.get(place)
    if (row === undefined) findings.push(`lib/${file}: ${place} is not in the layout table of docs/development.md`)
    for (const specifier of specifiersOf(source)) {
      const target = join(dirname(file), specifier).replace(/\.js$/, '.ts').replace(/\.([cm])js$/, '.$1ts')
      if (!graph.has(target)) {
        findings.push(`lib/${file}: imports ${specifier}, which is no file of lib/`)
        continue
      }
      graph.get(file).push(target)
      const into = placeOf(target)
      if (row !== undefined && !row.places.includes(into) && !row.allowed.includes(into)) {
        findings.push(`lib/${file}: imports lib/${target}, but ${row.places.join(', ')} may not import ${into}`)
      }
    }
  }
  for (const circle of circlesOf(graph)) findings.push(`import circle of ${circle.length}: ${circle.map((file) => `lib/${file}`).join(', ')}`)
  return findings
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const findings = checkLayout(process.argv[2] ?? '.')
  for (const finding of findings) console.log(finding)
  process.exitCode = findings.length === 0 ? 0 : 1
}
