// `node bench/profile-summary.js <file.cpuprofile> [top]`: self time by function in a V8 CPU
// profile (as `BENCH_CPU_PROF=<dir> npm run bench` writes one for every server), most first, so that
// two profiles can be compared line by line.
import { readFileSync } from 'node:fs'
import { basename } from 'node:path'

const [file, top = '25'] = process.argv.slice(2)
const { nodes, samples, timeDeltas } = JSON.parse(readFileSync(file, 'utf8'))
const byId = new Map(nodes.map((node) => [node.id, node]))
const self = new Map()
let total = 0
samples.forEach((id, i) => {
  const { functionName, url, lineNumber } = byId.get(id).callFrame
  const name = `${functionName || '(anonymous)'} ${url ? `${basename(url)}:${lineNumber + 1}` : ''}`.trim()
  self.set(name, (self.get(name) ?? 0) + timeDeltas[i])
  total += timeDeltas[i]
})
console.log(`${file}: ${(total / 1000).toFixed(0)} ms sampled`)
for (const [name, micros] of [...self].sort((a, b) => b[1] - a[1]).slice(0, Number(top))) {
  console.log(`${(micros / 1000).toFixed(1).padStart(9)} ms ${(100 * micros / total).toFixed(1).padStart(5)}%  ${name}`)
}
