// The three faces of the plugin's entry are one API: `require()` gives the plugin function with
// `default`, `fastifyDigestFields` and every public value on it (as an @fastify plugin), `import`
// gives the same objects, and the types of the CommonJS entry (`export =` and its namespace) name
// every value and type the ES module entry's types do. Read from dist/, which pretest builds.
import { createRequire } from 'node:module'
import { join } from 'node:path'
import t from 'tap'
import ts from 'typescript'

const dist = join(import.meta.dirname, '../../dist')

t.test('require() gives the plugin function, with every value of the ES module entry on it', async (t) => {
  const required = createRequire(import.meta.url)(join(dist, 'index.cjs')) as Record<string, unknown> & ((...args: unknown[]) => unknown)
  const imported = await import(join(dist, 'index.mjs')) as Record<string, unknown>
  t.type(required, 'function')
  t.equal(required.default, required, 'default')
  t.equal(required.fastifyDigestFields, required, 'fastifyDigestFields')
  t.equal(imported.default, required, 'the ES module default export is the same function')
  // What Node's reading of a CommonJS module adds is no API: the interop marker __esModule and,
  // from Node 23, 'module.exports' itself.
  const names = Object.keys(imported).filter((name) => !['default', '__esModule', 'module.exports'].includes(name))
  t.ok(names.includes('DigestProblem') && names.includes('digestProblemSchemas'), 'the values were read')
  for (const name of names) t.equal(required[name], imported[name], name)
})

t.test('the CommonJS types name every value and type the ES module types do', async (t) => {
  const entries = { esm: join(dist, 'index.d.mts'), cjs: join(dist, 'index.d.cts') }
  const program = ts.createProgram(Object.values(entries), {
    module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, strict: true, noEmit: true, types: ['node']
  })
  t.same(ts.getPreEmitDiagnostics(program).map((diagnostic) => ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')), [])
  const checker = program.getTypeChecker()
  const moduleOf = (path: string): ts.Symbol => checker.getSymbolAtLocation(program.getSourceFile(path) as ts.SourceFile) as ts.Symbol
  const resolved = (symbol: ts.Symbol): ts.Symbol => (symbol.flags & ts.SymbolFlags.Alias) !== 0 ? checker.getAliasedSymbol(symbol) : symbol
  const named = (symbols: ts.Symbol[], meaning: ts.SymbolFlags): string[] =>
    symbols.filter((symbol) => (resolved(symbol).flags & meaning) !== 0).map((symbol) => symbol.name).sort()

  const esm = checker.getExportsOfModule(moduleOf(entries.esm))
  const cjsModule = moduleOf(entries.cjs)
  const exported = cjsModule.exports?.get(ts.InternalSymbolName.ExportEquals) as ts.Symbol
  const cjsValues = checker.getTypeOfSymbol(resolved(exported)).getProperties()
  const cjsTypes = checker.getExportsOfModule(cjsModule)

  t.same(named(cjsValues, ts.SymbolFlags.Value), named(esm, ts.SymbolFlags.Value), 'values')
  t.same(named(cjsTypes, ts.SymbolFlags.Type), named(esm, ts.SymbolFlags.Type), 'types')
  t.ok(named(esm, ts.SymbolFlags.Type).includes('VerifiedDigest'), 'the types were read')
})
