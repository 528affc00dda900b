// `node bench/ablations.js [rounds] [requests]` (after npm run build): where the plugin's CPU per
// small request goes. Each ablation is a copy of dist/ with one piece of work cut out or changed
// (so most of them are not correct plugins: they only measure), served by bench/server.js and
// measured by bench/cpu-per-request.js beside the unchanged build, bare Fastify and the two
// comparators. The table of BENCHMARKS.md's notes comes from this script.
import { execFileSync } from 'node:child_process'
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const [rounds = '5', requests = '60000'] = process.argv.slice(2)
const root = fileURLToPath(new URL('..', import.meta.url))

// name: [file in dist/, text to find, what to put in its place]
const ablations = {
  // The onRequest hook returns at once when a field is present: the hooks and the header alone.
  'hooks only': ['index.js', '        const settings = settingsOf(request);', '        if (!noFields) { done(); return; }\n        const settings = settingsOf(request);'],
  // The fields are parsed and judged, and the content is left alone.
  'fields judged, content not verified': ['request-verification.js', '    const announced = (0, fields_js_1.announcedFields)(headers);', '    if (findings.length === 0) { done(); return; }\n    const announced = (0, fields_js_1.announcedFields)(headers);'],
  // request.raw is taken over, but chunks pass straight on and the end concludes at once.
  'content taken over, not hashed': ['verifier.js', '    receive(chunk) {\n', '    receive(chunk) {\n        if (chunk !== null) return this.#push.call(this.#source, chunk);\n        if (!this.#ending) { this.#ending = true; this.settled = true; this.#conclude(null); }\n        return false;\n'],
  // Every chunk hashed with a Hash object and handed on at once: no hold-back, no one-shot hash.
  'Hash object, no hold-back': ['verifier.js', '        this.#hashes.add(bytes);\n', '        this.#hashes.hash(bytes);\n        return this.#push.call(this.#source, bytes);\n'],
  // Each field text parsed once and reused: what parsing costs (not valid outside a benchmark,
  // which sends the same field every time).
  'parse cached': ['fields.js', '(0, dictionary_js_1.parseDictionary)(text)', '(parsed.get(text) ?? parsed.set(text, (0, dictionary_js_1.parseDictionary)(text)).get(text))', '"use strict";\nconst parsed = new Map();']
}

const slug = (name) => name.replace(/[^a-z0-9]+/g, '-')
const builds = mkdtempSync(join(tmpdir(), 'digest-ablations-'))
try {
  const configs = ['bare:none', 'plugin:none', 'plugin:sha-256', 'raw-body:sha-256', 'streaming:sha-256']
  for (const [name, [file, find, replace, prefix]] of Object.entries(ablations)) {
    const dir = join(builds, slug(name))
    cpSync(join(root, 'dist'), dir, { recursive: true })
    const path = join(dir, file)
    const source = readFileSync(path, 'utf8')
    // A changed build no longer has the text: fail rather than measure the unchanged plugin.
    if (!source.includes(find)) throw new Error(`${name}: ${file} has no ${JSON.stringify(find)}`)
    const changed = source.replace(find, replace)
    writeFileSync(path, prefix === undefined ? changed : changed.replace('"use strict";', prefix))
    configs.push(`plugin@${join(dir, 'index.js')}:sha-256`)
  }
  // Resolving fastify-plugin and structured-headers from the copies.
  symlinkSync(join(root, 'node_modules'), join(builds, 'node_modules'))
  const table = execFileSync(process.execPath, [fileURLToPath(new URL('./cpu-per-request.js', import.meta.url)), rounds, requests, ...configs], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] })
  const names = Object.fromEntries(Object.keys(ablations).map((name) => [slug(name), name]))
  console.log(table.replace(/plugin@\S*\/([^/]+)\/index\.js/g, (_match, dir) => `plugin, ${names[dir]}`))
} finally {
  rmSync(builds, { recursive: true, force: true })
}
