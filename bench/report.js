// Writes BENCHMARKS.md and bench/sweep.svg from the medians of a run. The hand-written notes
// between the notes markers of an existing BENCHMARKS.md are kept.
import { readFile, writeFile } from 'node:fs/promises'

const root = new URL('../', import.meta.url)
const MiB = 1024 * 1024
const notesStart = '<!-- notes: kept when the report is written again -->'
const notesEnd = '<!-- /notes -->'

const fixed = (value, digits = 2) => value.toFixed(digits)
const check = (met) => (met ? 'met' : '**not met**')
const sizeName = (bytes) => (bytes >= MiB ? `${bytes / MiB} MiB` : `${bytes / 1024} KiB`)

function table (head, rows) {
  return [
    `| ${head.join(' | ')} |`,
    `|${head.map(() => '---').join('|')}|`,
    ...rows.map((row) => `| ${row.join(' | ')} |`)
  ].join('\n')
}

function smallSection ({ bytes, samples }, median) {
  const rps = Object.fromEntries(Object.entries(samples).map(([name, values]) => [name, median(values)]))
  const bare = rps['bare Fastify']
  const handwritten = rps['hand-written, sha-256 Content-Digest']
  const rows = Object.entries(rps).map(([name, value]) => [
    name, fixed(value, 0), `${fixed(value / bare)}x`, `${fixed(value / handwritten)}x`, samples[name].map((v) => fixed(v, 0)).join(', ')
  ])
  const noField = rps['plugin, no digest field'] / bare
  const sha256 = rps['plugin, sha-256 Content-Digest']
  const targets = [
    ['no digest field ≥ 0.97x bare', `${fixed(noField)}x`, check(noField >= 0.97)],
    ['sha-256 Content-Digest ≥ 0.85x bare', `${fixed(sha256 / bare)}x`, check(sha256 / bare >= 0.85)],
    ['sha-256 Content-Digest ≥ 1.3x hand-written', `${fixed(sha256 / handwritten)}x`, check(sha256 / handwritten >= 1.3)]
  ]
  return {
    rps,
    targets,
    text: `## Small requests: ${bytes}-byte JSON POST

A handler that reads the parsed body; autocannon with 64 connections and 10 pipelined requests
each, as Fastify's own benchmarks run; median requests per second.

${table(['configuration', 'req/s', 'vs bare', 'vs hand-written', 'rounds'], rows)}`
  }
}

function largeSection ({ bytes, samples }, median) {
  const gib = bytes / (1024 * MiB)
  const at = (name, key) => median(samples[name].map((sample) => sample[key]))
  const bareCpu = at('bare Fastify, no verification', 'cpu')
  const bareRss = at('bare Fastify, no verification', 'maxRSS')
  const floors = { 'sha-256': at('createHash sha-256', 'cpu') / gib, 'sha-512': at('createHash sha-512', 'cpu') / gib }
  const names = Object.keys(samples).filter((name) => !name.startsWith('createHash'))
  const rows = names.map((name) => {
    const cpu = at(name, 'cpu')
    const algorithm = name.match(/sha-(256|512)/)?.[0]
    const extra = (cpu - bareCpu) / gib
    return [
      name,
      fixed(bytes / MiB / at(name, 'wall'), 0),
      fixed(cpu / gib),
      algorithm ? fixed(extra) : '–',
      algorithm ? `${fixed(floors[algorithm])} (${fixed(extra / floors[algorithm])}x)` : '–',
      fixed(at(name, 'maxRSS') / MiB, 0),
      fixed((at(name, 'maxRSS') - bareRss) / MiB, 0)
    ]
  })
  const extraCpu = (name, algorithm) => (at(name, 'cpu') - bareCpu) / gib / floors[algorithm]
  const rssAbove = (at('plugin, sha-256', 'maxRSS') - at('plugin, no digest field', 'maxRSS')) / MiB
  const targets = [
    ['extra CPU per GiB for sha-256 ≤ 1.10x createHash alone', `${fixed(extraCpu('plugin, sha-256', 'sha-256'))}x`, check(extraCpu('plugin, sha-256', 'sha-256') <= 1.1)],
    ['extra CPU per GiB for sha-512 ≤ 1.10x createHash alone', `${fixed(extraCpu('plugin, sha-512', 'sha-512'))}x`, check(extraCpu('plugin, sha-512', 'sha-512') <= 1.1)],
    [`peak RSS of a ${sizeName(bytes)} upload ≤ 32 MiB above the same upload without verification`, `${fixed(rssAbove, 1)} MiB`, check(rssAbove <= 32)]
  ]
  return {
    targets,
    text: `## Large uploads: ${sizeName(bytes)} streamed over loopback

One upload a fresh server process (so that its peak RSS is this upload's), to a route that hands
the payload stream to the handler. Extra CPU is the server's CPU time per GiB above bare Fastify's
for the same upload; the floor is what \`crypto.createHash\` alone needs for the same bytes in the
same run.

${table(['configuration', 'MiB/s', 'server CPU s/GiB', 'extra CPU s/GiB', 'createHash floor s/GiB (extra/floor)', 'peak RSS MiB', 'RSS above bare MiB'], rows)}`
  }
}

function sweepSection (sizes, median) {
  const names = Object.keys(sizes[0].samples)
  const rows = sizes.map(({ size, samples }) => [
    sizeName(size),
    ...names.map((name) => `${fixed(median(samples[name]) * size / MiB, 0)} MiB/s (${fixed(median(samples[name]), 0)} req/s)`),
    `${fixed(median(samples.plugin) / median(samples.bare))}x`
  ])
  return `## Body size sweep

\`application/octet-stream\` bodies parsed as a Buffer, sha-256 \`Content-Digest\` for the plugin and
the hand-written approach; median request body throughput.

![Throughput by body size](bench/sweep.svg)

${table(['body', ...names, 'plugin vs bare'], rows)}`
}

/** A line chart of MiB/s by body size (log scale), one line per configuration. */
function sweepChart (sizes, median) {
  const names = Object.keys(sizes[0].samples)
  const colours = ['#4c78a8', '#e45756', '#54a24b']
  const width = 640
  const height = 360
  const margin = { left: 64, right: 150, top: 24, bottom: 48 }
  const plotWidth = width - margin.left - margin.right
  const plotHeight = height - margin.top - margin.bottom
  const throughput = (size, name) => median(sizes.find((entry) => entry.size === size).samples[name]) * size / MiB
  const top = Math.max(...sizes.flatMap(({ size }) => names.map((name) => throughput(size, name)))) * 1.1
  const x = (index) => margin.left + (index / (sizes.length - 1)) * plotWidth
  const y = (value) => margin.top + plotHeight - (value / top) * plotHeight
  const ticks = Array.from({ length: 5 }, (_, i) => (top / 5) * (i + 1))
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    ...ticks.map((tick) => `<line x1="${margin.left}" x2="${margin.left + plotWidth}" y1="${fixed(y(tick), 1)}" y2="${fixed(y(tick), 1)}" stroke="#ddd"/><text x="${margin.left - 6}" y="${fixed(y(tick) + 4, 1)}" text-anchor="end">${fixed(tick, 0)}</text>`),
    `<line x1="${margin.left}" x2="${margin.left + plotWidth}" y1="${y(0)}" y2="${y(0)}" stroke="#333"/>`,
    ...sizes.map(({ size }, i) => `<text x="${x(i)}" y="${y(0) + 18}" text-anchor="middle">${sizeName(size)}</text>`),
    `<text x="${margin.left + plotWidth / 2}" y="${height - 8}" text-anchor="middle">request body size</text>`,
    `<text transform="translate(16 ${margin.top + plotHeight / 2}) rotate(-90)" text-anchor="middle">MiB/s of request bodies</text>`,
    ...names.map((name, n) => {
      const points = sizes.map(({ size }, i) => `${fixed(x(i), 1)},${fixed(y(throughput(size, name)), 1)}`).join(' ')
      const legendY = margin.top + 16 + n * 20
      return `<polyline fill="none" stroke="${colours[n]}" stroke-width="2" points="${points}"/>` +
        `<line x1="${width - margin.right + 16}" x2="${width - margin.right + 36}" y1="${legendY - 4}" y2="${legendY - 4}" stroke="${colours[n]}" stroke-width="2"/>` +
        `<text x="${width - margin.right + 42}" y="${legendY}">${name}</text>`
    }),
    '</svg>'
  ]
  return parts.join('\n') + '\n'
}

async function keptNotes () {
  try {
    const previous = await readFile(new URL('BENCHMARKS.md', root), 'utf8')
    const start = previous.indexOf(notesStart)
    const end = previous.indexOf(notesEnd)
    if (start !== -1 && end > start) return previous.slice(start, end + notesEnd.length)
  } catch {}
  return `${notesStart}\n${notesEnd}`
}

export async function writeReport ({ started, machine, settings, median, small, large, sizes }) {
  const smallPart = smallSection(small, median)
  const largePart = largeSection(large, median)
  const command = `BENCH_ROUNDS=${settings.rounds} BENCH_SECONDS=${settings.seconds} BENCH_UPLOAD_MIB=${settings.uploadMiB} npm run bench`
  const report = `# Benchmarks

Written by \`npm run bench\` (\`bench/run.js\`) on ${started.toISOString().slice(0, 10)}: ${machine.cpu}, ${machine.cores} cores,
Node ${machine.node}. Each server runs in its own process on 127.0.0.1, load comes from autocannon
used as a library, configurations are interleaved round by round (A B C A B C …) and the medians
of ${settings.rounds} rounds are reported. The exact command:

\`\`\`sh
${command}
\`\`\`

## Targets

${table(['target', 'measured', ''], [...smallPart.targets, ...largePart.targets])}

${smallPart.text}

${largePart.text}

${sweepSection(sizes, median)}

## What made the difference

${await keptNotes()}
`
  await writeFile(new URL('BENCHMARKS.md', root), report)
  await writeFile(new URL('bench/sweep.svg', root), sweepChart(sizes, median))
}
