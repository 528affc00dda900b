// `node bench/ablations.js [rounds] [requests]` (after npm run build): where the plugin's CPU per
// small request goes beyond the floor (bench/floor.js). Each ablation is a copy of dist/ with one
// piece of the plugin's work cut out (so none of them is a correct plugin: they only measure),
// served by bench/server.js and measured by bench/cpu-per-request.js beside the floor, the
// unchanged build and bare Fastify, every figure also as the median of its per-round ratios to
// the floor. The table of BENCHMARKS.md's notes comes from this script. BENCH_COUNT=instructions
// counts each build's instructions a request with bench/instructions.js instead (the first
// argument is then its warm-up, in requests).
import { execFileSync } from 'node:child_process'
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

// The requests measured carry a sha-256 Content-Digest, or none with a third argument of none
// (measured against bare Fastify first).
const [rounds = '10', requests = '20000', header = 'sha-256'] = process.argv.slice(2)
const root = fileURLToPath(new URL('..', import.meta.url))

// name: the changes of one cut, each [file in dist/, text to find, what to put in its place, text to put at the top]
const cuts = {
  // The route's two response hooks (Want-* answered, digests sent) never added.
  'no response digest hook': [['response/route-hooks.js', '    queueMicrotask(() => {', '    if (false) queueMicrotask(() => {']],
  // A success reply and a parser that read part of the content are never held for the verdict.
  'no reply or partial reader held': [['index.js', "    fastify.addHook('onSend', function holdSuccessReplies(request, reply, payload, done) {\n",
    "    fastify.addHook('onSend', function holdSuccessReplies(request, reply, payload, done) {\n        if (true) return done(null, payload);\n"]],
  // The route's settings read from Fastify's own route context, not through request.routeOptions,
  // whose getter builds an object of twelve fields a call.
  'settings without request.routeOptions': [['index.js', '        const config = request.routeOptions.config;',
    "        kContext ??= Object.getOwnPropertySymbols(request).find((symbol) => symbol.description === 'fastify.context');\n        const config = request[kContext].config;",
    '"use strict";\nlet kContext;']]
}
// Requests without a field, for which they find nothing to do: the onRequest and preValidation hooks never added.
if (header === 'none') {
  cuts['no request hooks'] = ['onRequest', 'preValidation'].map((hook) => ['index.js', `    fastify.addHook('${hook}', function `, `    if (false) fastify.addHook('${hook}', function `])
}
// Each cut alone, then all of them together: what is left is what the floor does not do at all.
const ablations = Object.fromEntries([
  ...Object.entries(cuts),
  [`all ${Object.keys(cuts).length} cut`, Object.values(cuts).flat()]
])

const slug = (name) => name.replace(/[^a-z0-9]+/g, '-')
const builds = mkdtempSync(join(tmpdir(), 'digest-ablations-'))
try {
  const configs = header === 'none' ? ['bare:none', 'plugin:none'] : ['floor:sha-256', 'bare:none', 'plugin:sha-256']
  for (const [name, changes] of Object.entries(ablations)) {
    const dir = join(builds, slug(name))
    cpSync(join(root, 'dist'), dir, { recursive: true })
    for (const [file, find, replace, top] of changes) {
      const path = join(dir, file)
      const source = readFileSync(path, 'utf8')
      // A changed build no longer has the text: fail rather than measure the unchanged plugin.
      if (!source.includes(find)) throw new Error(`${name}: ${file} has no ${JSON.stringify(find)}`)
      const changed = source.replace(find, replace)
      writeFileSync(path, top === undefined ? changed : changed.replace('"use strict";', top))
    }
    configs.push(`plugin@${join(dir, 'index.js')}:${header}`)
  }
  // Resolving fastify-plugin and structured-headers from the copies.
  symlinkSync(join(root, 'node_modules'), join(builds, 'node_modules'))
  const script = process.env.BENCH_COUNT === 'instructions' ? './instructions.js' : './cpu-per-request.js'
  const table = execFileSync(process.execPath, [fileURLToPath(new URL(script, import.meta.url)), rounds, requests, ...configs], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] })
  const names = Object.fromEntries(Object.keys(ablations).map((name) => [slug(name), name]))
  console.log(table.replace(/plugin@\S*\/([^/]+)\/index\.js/g, (_match, dir) => `plugin, ${names[dir]}`))
} finally {
  rmSync(builds, { recursive: true, force: true })
}
