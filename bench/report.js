// Writes BENCHMARKS.md and bench/sweep.svg from the samples of a run. Every ratio is taken within
// a round (both sides measured in that round, each in a fresh process) and reported as the median
// of the rounds with their range. The hand-written notes between the notes markers of an existing
// BENCHMARKS.md are kept.
import { readFile, writeFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { cpus, release } from 'node:os'
import { median } from './shared.js'

const root = new URL('../', import.meta.url)
const require = createRequire(import.meta.url)
const MiB = 1024 * 1024
const GiB = 1024 * MiB
const notesStart = '<!-- notes: kept when the report is written again -->'
const notesEnd = '<!-- /notes -->'

const fixed = (value, digits = 2) => value.toFixed(digits)
const check = (met) => (met ? 'met' : '**not met**')
const sizeName = (bytes) => (bytes >= MiB ? `${bytes / MiB} MiB` : `${bytes / 1024} KiB`)

/** Median and range of a list of per-round values. */
const spread = (values) => ({ median: median(values), min: Math.min(...values), max: Math.max(...values) })
const show = ({ median, min, max }, digits = 2, unit = '') => `${fixed(median, digits)}${unit} (${fixed(min, digits)} to ${fixed(max, digits)})`
/** A ratio's median and range, as 0.78x (0.75 to 0.81). */
const times = (ratio) => show(ratio, 2, 'x')
/** Per-round ratios of two configurations measured in the same rounds. */
const ratios = (a, b) => spread(a.map((value, round) => value / b[round]))
const differences = (a, b) => a.map((value, round) => value - b[round])

function table (head, rows) {
  return [
    `| ${head.join(' | ')} |`,
    `|${head.map(() => '---').join('|')}|`,
    ...rows.map((row) => `| ${row.join(' | ')} |`)
  ].join('\n')
}

const rpsOf = (samples, name) => samples[name].map(({ rps }) => rps)
const cpuOf = (samples, name) => samples[name].map(({ cpu }) => cpu)

/**
 * Each comparison of the targets two ways, within each round: requests per second, and the inverse
 * ratio of server CPU per request, which the load generator's own speed does not cap.
 */
function compare (samples, name, other) {
  return { rps: ratios(rpsOf(samples, name), rpsOf(samples, other)), cpu: ratios(cpuOf(samples, other), cpuOf(samples, name)) }
}

function smallSection ({ bytes, pipelining, samples }) {
  const bare = 'bare Fastify'
  const rows = Object.keys(samples).map((name) => [
    name,
    show(spread(rpsOf(samples, name)), 0),
    times(ratios(rpsOf(samples, name), rpsOf(samples, bare))),
    show(spread(cpuOf(samples, name)), 1),
    times(ratios(cpuOf(samples, bare), cpuOf(samples, name)))
  ])
  const comparisons = {
    noField: compare(samples, 'plugin, no digest field', bare),
    sha256: compare(samples, 'plugin, sha-256', bare),
    rawBody: compare(samples, 'plugin, sha-256', 'raw-body comparator, sha-256'),
    streaming: compare(samples, 'plugin, sha-256', 'streaming comparator, sha-256'),
    floor256: compare(samples, 'plugin, sha-256', 'floor, sha-256'),
    floor512: compare(samples, 'plugin, sha-512', 'floor, sha-512'),
    floorRepr: compare(samples, 'plugin, Repr-Digest sha-256', 'floor, Repr-Digest sha-256'),
    // The mix against the mean of its two kinds run apart, in the same round: above 1x, having both
    // kinds in one process costs more than each alone.
    mix: {
      rps: ratios(rpsOf(samples, 'plugin, half with sha-256'), rpsOf(samples, 'plugin, no digest field').map((rps, round) => 2 / (1 / rps + 1 / rpsOf(samples, 'plugin, sha-256')[round]))),
      cpu: ratios(cpuOf(samples, 'plugin, half with sha-256'), cpuOf(samples, 'plugin, no digest field').map((cpu, round) => (cpu + cpuOf(samples, 'plugin, sha-256')[round]) / 2))
    }
  }
  const shape = pipelining === 1 ? '50 connections, one request at a time each, as real clients send them' : `50 connections with ${pipelining} pipelined requests each, as Fastify's own benchmarks run`
  return {
    comparisons,
    text: `${table(['configuration', 'req/s', 'vs bare Fastify', 'server CPU µs/request', 'bare CPU / this CPU'], rows)}

With ${shape}: the plugin with sha-256 is at ${times(comparisons.rawBody.rps)} the raw-body
comparator and ${times(comparisons.streaming.rps)} the streaming comparator in requests per second;
${times(comparisons.rawBody.cpu)} and ${times(comparisons.streaming.cpu)} by server CPU per request
(${bytes}-byte bodies).`
  }
}

/** The small-request targets, judged by server CPU per request as issue 29 states them; requests per second beside. */
function smallTargets ({ noField, sha256, rawBody, streaming, mix, floor256, floor512, floorRepr }) {
  // Within 5% of the floor is at least 1/1.05 of its throughput per CPU.
  return [
    ['1 KiB JSON, sha-256 Content-Digest: within 5% of the floor', times(floor256.cpu), times(floor256.rps), check(floor256.cpu.median >= 1 / 1.05)],
    ['1 KiB JSON, sha-512 Content-Digest: within 5% of the floor', times(floor512.cpu), times(floor512.rps), check(floor512.cpu.median >= 1 / 1.05)],
    ['1 KiB JSON, sha-256 Repr-Digest: within 5% of the floor', times(floorRepr.cpu), times(floorRepr.rps), check(floorRepr.cpu.median >= 1 / 1.05)],
    ['1 KiB JSON, sha-256: ≥ 1.10x the raw-body comparator', times(rawBody.cpu), times(rawBody.rps), check(rawBody.cpu.median >= 1.1)],
    ['no digest field ≥ 0.97x bare Fastify', times(noField.cpu), times(noField.rps), check(noField.cpu.median >= 0.97)],
    ['1 KiB JSON, half with sha-256: ≤ 1.05x the mean of the two kinds apart', times(mix.cpu), `${times(mix.rps)} (harmonic mean)`, check(mix.cpu.median <= 1.05)],
    ['1 KiB JSON, sha-256 Content-Digest ≥ 0.80x bare Fastify (an earlier issue)', times(sha256.cpu), times(sha256.rps), check(sha256.cpu.median >= 0.8)],
    ['1 KiB JSON, sha-256: ≥ 1.5x the streaming comparator (an earlier issue)', times(streaming.cpu), times(streaming.rps), check(streaming.cpu.median >= 1.5)]
  ]
}

/** The small-request part alone, as \`BENCH_ONLY=small\` prints it: its targets, then its table. */
export function smallRequestsPart (result) {
  const part = smallSection(result)
  return `${table(['target', 'by server CPU per request: median (range)', 'in requests per second', ''], smallTargets(part.comparisons))}\n\n${part.text}`
}

export function largeSection ({ bytes, samples }) {
  const gib = bytes / GiB
  const baseline = samples['plugin, no digest field']
  const floor = { 'sha-256': samples['createHash sha-256'].map(({ cpu }) => cpu), 'sha-512': samples['createHash sha-512'].map(({ cpu }) => cpu) }
  const names = Object.keys(samples).filter((name) => !name.startsWith('createHash'))
  const extra = (name, kind = 'cpu') => differences(samples[name].map((sample) => sample[kind]), baseline.map((sample) => sample[kind]))
  const rssAbove = (name) => spread(differences(samples[name].map(({ maxRSS }) => maxRSS), baseline.map(({ maxRSS }) => maxRSS)).map((value) => value / MiB))
  const rows = names.map((name) => {
    const algorithm = /sha-(256|512)/.exec(name)?.[0]
    const compared = algorithm === undefined
      ? ['–', '–', '–']
      : [show(spread(extra(name).map((cpu) => cpu / gib))), times(ratios(extra(name), floor[algorithm])), times(ratios(extra(name, 'user'), floor[algorithm]))]
    return [
      name,
      fixed(median(samples[name].map(({ wall }) => bytes / MiB / wall)), 0),
      show(spread(samples[name].map(({ cpu }) => cpu / gib))),
      ...compared,
      fixed(median(samples[name].map(({ maxRSS }) => maxRSS)) / MiB, 0),
      name === 'plugin, no digest field' ? '–' : show(rssAbove(name), 1)
    ]
  })
  const targets = ['sha-256', 'sha-512'].flatMap((algorithm) => {
    const name = `plugin, ${algorithm}`
    const cpu = ratios(extra(name), floor[algorithm])
    const rss = rssAbove(name)
    return [
      [`${sizeName(bytes)} upload, ${algorithm}: extra CPU ≤ 1.10x createHash alone`, times(cpu), '–', check(cpu.median <= 1.1)],
      [`${sizeName(bytes)} upload, ${algorithm}: peak RSS ≤ 32 MiB above no digest field`, `${show(rss, 1)} MiB`, '–', check(rss.median <= 32)]
    ]
  })
  return {
    targets,
    text: table(['configuration', 'MiB/s', 'server CPU s/GiB', 'extra CPU s/GiB over no field', 'extra CPU / createHash alone', 'extra user CPU / createHash alone', 'peak RSS MiB', 'RSS above no field MiB'], rows) +
      `\n\ncreateHash alone, over the same bytes in 64 KiB chunks: sha-256 ${show(spread(floor['sha-256'].map((cpu) => cpu / gib)))} s/GiB, sha-512 ${show(spread(floor['sha-512'].map((cpu) => cpu / gib)))} s/GiB.`
  }
}

function downloadSection ({ bytes, samples }) {
  const gib = bytes / GiB
  const cpu = (name) => samples[name].map((sample) => sample.cpu)
  const rows = ['sha-256', 'sha-512'].map((algorithm) => {
    const extra = differences(cpu(`Want-Repr-Digest ${algorithm}`), cpu('no Want-Repr-Digest'))
    return [algorithm, show(spread(extra.map((value) => value / gib))), show(spread(cpu(`createHash ${algorithm}`).map((value) => value / gib))), times(ratios(extra, cpu(`createHash ${algorithm}`)))]
  })
  return table(['algorithm', 'extra server CPU s/GiB', 'createHash alone s/GiB', 'ratio'], rows)
}

export function staticSection ({ fileBytes, count, samples }) {
  const plain = '@fastify/static'
  const digests = '@fastify/static + staticFileDigests()'
  const first = (name) => samples[name].map((sample) => sample.first)
  const rows = [plain, digests].map((name) => [
    name,
    show(spread(first(name)), 0),
    name === plain ? '–' : times(ratios(first(name), first(plain))),
    show(spread(rpsOf(samples, name)), 0),
    show(spread(cpuOf(samples, name)), 1),
    name === plain ? '–' : `${times(ratios(rpsOf(samples, name), rpsOf(samples, plain)))} requests/s, ${times(ratios(cpuOf(samples, plain), cpuOf(samples, name)))} by CPU`
  ])
  return `${count} files of ${sizeName(fileBytes)}, each requested once by a fresh server (first requests, 8 at a time), then one of them for the measured run (later requests, 50 connections).\n\n` +
    table(['configuration', 'server CPU µs per first request', 'ratio', 'later requests/s', 'server CPU µs per later request', 'later, per-round ratio to @fastify/static alone'], rows)
}

export function resumableSection ({ bytes, appendBytes, samples }) {
  const gib = bytes / GiB
  const cpu = (name) => samples[name].map((sample) => sample.cpu)
  const extra = (name) => differences(cpu(name), cpu('no digest field'))
  const uploads = ['sha-256', 'sha-512'].flatMap((algorithm) => {
    const native = `Content-Digest ${algorithm}`
    const running = `resumable creation, Repr-Digest ${algorithm}`
    return [native, running].map((name) => [
      name,
      show(spread(extra(name).map((value) => value / gib))),
      name === native ? '–' : times(ratios(extra(running), extra(native)))
    ])
  })
  const floors = ['sha-256', 'sha-512'].map((algorithm) => [
    algorithm,
    show(spread(cpu(`createHash ${algorithm}`).map((value) => value / gib))),
    show(spread(cpu(`hash-wasm ${algorithm}`).map((value) => value / gib))),
    times(ratios(cpu(`hash-wasm ${algorithm}`), cpu(`createHash ${algorithm}`)))
  ])
  const plain = `${sizeName(appendBytes)} PUT, Content-Digest sha-256`
  const append = `${sizeName(appendBytes)} append, sha-256 running`
  const appends = [plain, append].map((name) => [
    name,
    show(spread(rpsOf(samples, name)), 0),
    show(spread(cpuOf(samples, name)), 0),
    name === plain ? '–' : `${times(ratios(rpsOf(samples, name), rpsOf(samples, plain)))} requests/s, ${times(ratios(cpuOf(samples, name), cpuOf(samples, plain)))} CPU`
  ])
  return `### ${sizeName(bytes)} upload\n\nExtra server CPU over the same upload without a digest field, in the same round.\n\n` +
    table(['configuration', 'extra server CPU s/GiB', 'ratio to Content-Digest (createHash)'], uploads) +
    '\n\nThe hashes alone, in 64 KiB chunks, each in a fresh process; hash-wasm as the plugin runs it, its state loaded and saved for each chunk:\n\n' +
    table(['algorithm', 'createHash s/GiB', 'hash-wasm s/GiB', 'ratio'], floors) +
    `\n\n### ${sizeName(appendBytes)} requests, 50 at a time\n\nEach append loads the upload's state, hashes, and saves it; the PUT checks its Content-Digest only.\n\n` +
    table(['configuration', 'requests/s', 'server CPU µs per request', 'per-round ratio to the PUT'], appends)
}

export function clientSection ({ bytes, downloadBytes, samples }) {
  const plain = 'undici'
  const intercepted = 'undici + digestInterceptor'
  const requests = table(['configuration', 'requests/s', 'client CPU µs per request', 'per-round ratio to undici'], [plain, intercepted].map((name) => [
    name, fixed(median(rpsOf(samples, name)), 0), fixed(median(cpuOf(samples, name)), 0),
    name === plain ? '–' : `${times(ratios(rpsOf(samples, name), rpsOf(samples, plain)))} requests/s, ${times(ratios(cpuOf(samples, name), cpuOf(samples, plain)))} CPU`
  ]))
  const gib = downloadBytes / GiB
  const download = (name) => samples[name].map((sample) => sample.download)
  const extra = differences(download(intercepted), download(plain))
  const floor = download('createHash sha-256')
  return `### ${sizeName(bytes)} JSON POSTs, 50 at a time\n\n${requests}\n\n### ${sizeName(downloadBytes)} download, sha-256 \`Repr-Digest\` in the trailer section\n\n` +
    table(['extra client CPU s/GiB', 'createHash alone s/GiB (64 KiB chunks)', 'ratio'], [[
      show(spread(extra.map((value) => value / gib))), show(spread(floor.map((value) => value / gib))), times(ratios(extra, floor))
    ]])
}

function sweepSection (sizes) {
  const throughput = (samples, name, size) => fixed(median(rpsOf(samples, name)) * size / MiB, 0)
  const rows = sizes.map(({ size, samples }) => {
    const [rawBody, streaming] = [compare(samples, 'plugin', 'raw-body'), compare(samples, 'plugin', 'streaming')]
    return [
      sizeName(size),
      ...['bare', 'plugin', 'raw-body', 'streaming'].map((name) => throughput(samples, name, size)),
      `${times(rawBody.rps)}; ${times(rawBody.cpu)}`,
      `${times(streaming.rps)}; ${times(streaming.cpu)}`,
      times(compare(samples, 'plugin', 'bare').rps)
    ]
  })
  const behind = (by) => sizes.filter(({ size, samples }) => size >= 16 * 1024 &&
    (compare(samples, 'plugin', 'raw-body')[by].median <= 1 || compare(samples, 'plugin', 'streaming')[by].median <= 1))
  const where = (list) => list.length === 0 ? 'ahead at every size' : `not ahead at ${list.map(({ size }) => sizeName(size)).join(', ')}`
  return {
    targets: [['every sweep size from 16 KiB: plugin ahead of both comparators (an earlier issue)', where(behind('cpu')), where(behind('rps')), check(behind('cpu').length === 0)]],
    text: table(['body', 'bare MiB/s', 'plugin MiB/s', 'raw-body MiB/s', 'streaming MiB/s', 'plugin / raw-body: req/s; CPU', 'plugin / streaming: req/s; CPU', 'plugin / bare: req/s'], rows)
  }
}

/** A line chart of MiB/s by body size, one line per configuration. */
function sweepChart (sizes) {
  const names = Object.keys(sizes[0].samples)
  const colours = ['#4c78a8', '#e45756', '#54a24b', '#b279a2']
  const width = 640
  const height = 360
  const margin = { left: 64, right: 150, top: 24, bottom: 48 }
  const plotWidth = width - margin.left - margin.right
  const plotHeight = height - margin.top - margin.bottom
  const throughput = (size, name) => median(rpsOf(sizes.find((entry) => entry.size === size).samples, name)) * size / MiB
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
  const previous = await readFile(new URL('BENCHMARKS.md', root), 'utf8').catch(() => '')
  const start = previous.indexOf(notesStart)
  const end = previous.indexOf(notesEnd)
  return start !== -1 && end > start ? previous.slice(start, end + notesEnd.length) : `${notesStart}\n${notesEnd}`
}

export async function writeReport ({ started, settings, small, pipelined, large, downloads, sizes, client, static: files, resumable }) {
  const version = (name) => require(`${name}/package.json`).version
  const smallPart = smallSection(small)
  const pipelinedPart = smallSection(pipelined)
  const largePart = largeSection(large)
  const sweepPart = sweepSection(sizes)
  const targets = [
    ...smallTargets(smallPart.comparisons),
    ...largePart.targets,
    ...sweepPart.targets
  ]
  const command = `BENCH_ROUNDS=${settings.rounds} BENCH_SECONDS=${settings.seconds} BENCH_UPLOAD_MIB=${settings.uploadMiB} BENCH_SEED=${settings.seed} npm run bench`
  const report = `# Benchmarks

Written by \`npm run bench\` (\`bench/run.js\`) on ${started.toISOString().slice(0, 10)}: ${cpus()[0]?.model ?? 'unknown CPU'}, ${cpus().length} cores, Linux ${release()};
Node ${process.version}, Fastify ${version('fastify')}, autocannon ${version('autocannon')}, fastify-digest-fields ${version('fastify-digest-fields')}.

Method: every measurement starts a fresh server process and warms it up (2 s of the same load for
small requests, 1 s in the sweep, a 64 MiB upload or download before the measured one); each round
runs every configuration of a part once, in a new random order; ${settings.pinned ? 'servers and the createHash floor ran pinned to the last core and the load generator (autocannon, used as a library) to the first, with `taskset`' : '**pinning did not apply** (no `taskset`, or one core): servers and the load generator shared the cores'}.
Every ratio is taken within a round and reported as the median of ${settings.rounds} rounds with their
range, so that one lucky process cannot become a configuration's result. The exact command:

\`\`\`sh
${command}
\`\`\`

The comparators are what a user writes without the plugin, both checking a sha-256
\`Content-Digest\` (\`bench/server.js\`): **raw-body** buffers the body with fastify-raw-body and
checks it with httpbis-digest-headers' \`verifyContentDigest\` in a \`preHandler\`, after the
parser has run on unverified bytes; **streaming** pipes the payload through \`createHash\` in a
\`preParsing\` hook and fails at its end. The **floor** (\`bench/floor.js\`) is the least code that
keeps the plugin's guarantee for the common case: \`request.raw\` taken over in \`onRequest\`, every
chunk hashed before any reader has it, the last kilobyte and the end held until the digest compares
equal, a partial reader and an early reply held for the verdict; nothing else.

## Targets

Each target is judged as issues 20 and 29 state it: by server CPU per request (the inverse ratio, so
that above 1x is faster), which the load generator's speed does not cap and which varies less
from process to process, or extra CPU for uploads; the third column gives the same comparison in
requests per second.

${table(['target', 'by server CPU per request: median (range)', 'in requests per second', ''], targets)}

## Small requests: 1 KiB JSON POST

A handler that reads the parsed body; median requests per second (range), and the per-round ratio.
50 connections, one request at a time each:

${smallPart.text}

Pipelined, 10 requests a connection:

${pipelinedPart.text}

## Large uploads: ${sizeName(large.bytes)} streamed over loopback

A route that hands the payload stream to the handler, which reads it to the end. Extra CPU is the
server's CPU time per GiB above the same plugin server's for the same upload without a digest
field, in the same round; it is compared with what \`crypto.createHash\` alone needs for the same
bytes, measured in a fresh process on the same core in the same round. Extra user CPU leaves out
the kernel's share: over loopback, the server that is the slower end receives more of the bytes in
its own system time. **Fastify alone, createHash in the route** hashes what its handler reads and
compares at the end, without the plugin and with no guarantee to readers: the least a server does
to check an upload, and so the floor of the extra CPU inside a server.

${largePart.text}

## Response digests: ${sizeName(downloads.bytes)} streamed download

A solicited \`Repr-Digest\` (\`Want-Repr-Digest\`), computed as the response streams and sent in the
trailer section; extra server CPU over the same download without the field, against
\`createHash\` alone over the same bytes in the 1 MiB blocks the route sends.

${downloadSection(downloads)}

## Static files with their digests

\`@fastify/static\` serving JavaScript files, alone and with \`staticFileDigests()\`: every response
of the second carries \`Repr-Digest\`, \`Content-Digest\` and \`Unencoded-Digest\` (sha-256) in the
header section. A first request of a file hashes it before sending; later requests find its
digests in the file digest cache.

${staticSection(files)}

## Resumable uploads

The running digest of a resumable upload (draft-ietf-httpbis-resumable-upload), hashed with
hash-wasm so that its state can be saved between requests, against the plugin checking a
\`Content-Digest\` with \`createHash\`; and the fixed cost of an append, which loads the upload's
state and saves it again.

${resumableSection(resumable)}

## The client interceptor

\`fastify-digest-fields/client\` in the load generator's process, against undici without it: the
same requests reach the same plugin server (the plain client sends the \`Content-Digest\` the
interceptor adds, written in), and both downloads ask for the same \`Repr-Digest\`, which only the
interceptor checks. Client CPU is this process's, per request or per GiB, in the same round.

${clientSection(client)}

## Body size sweep

\`application/octet-stream\` bodies parsed as a Buffer, sha-256 \`Content-Digest\` for the plugin and
both comparators; median request body throughput, and per-round ratios. 8 connections, 2 from
4 MiB up.

![Throughput by body size](bench/sweep.svg)

${sweepPart.text}

## What each change did, where the time goes, and the targets

${await keptNotes()}
`
  await writeFile(new URL('BENCHMARKS.md', root), report)
  await writeFile(new URL('bench/sweep.svg', root), sweepChart(sizes))
}
