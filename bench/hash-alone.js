// The floor of verification: `node bench/hash-alone.js <algorithm> <MiB> <chunk bytes>` hashes that
// many MiB with crypto.createHash in chunks of the size the server sees, after a warm-up, in its own
// process (pinned like a server), and reports the CPU seconds over IPC. `wasm-sha256` and
// `wasm-sha512` hash with hash-wasm as resumable uploads do: the state loaded for each chunk into
// an instance that every upload shares, and saved after it.
import { createHash, randomBytes } from 'node:crypto'
import { createSHA256, createSHA512 } from 'hash-wasm'

const [algorithm, mib, chunkBytes] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])]
const chunk = randomBytes(chunkBytes)
const chunks = Math.round(mib * 1024 * 1024 / chunkBytes)

const wasm = { 'wasm-sha256': await createSHA256(), 'wasm-sha512': await createSHA512() }[algorithm]

function hashAll (count) {
  if (wasm !== undefined) {
    let state = wasm.init().save()
    for (let i = 0; i < count; i++) state = wasm.load(state).update(chunk).save()
    return wasm.load(state).digest('binary')
  }
  const hash = createHash(algorithm)
  for (let i = 0; i < count; i++) hash.update(chunk)
  return hash.digest()
}

hashAll(Math.ceil(chunks / 16))
const before = process.cpuUsage()
hashAll(chunks)
const { user, system } = process.cpuUsage(before)
process.send({ cpu: (user + system) / 1e6 }, () => process.exit(0))
