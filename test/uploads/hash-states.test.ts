// The saved states of hash-wasm that resumable uploads store: the layout the plugin checks them
// against is that of the hash-wasm build installed (a new build fails here first), and every way a
// state can be wrong is named.
import { createHash } from 'node:crypto'
import t from 'tap'
import { createMD5, createSHA1, createSHA256, createSHA512 } from 'hash-wasm'
import { digestOfState, initialState, prepareHasher, stateFault, storedState, updateState } from '../../lib/uploads/hash-states.js'

const builds = { 'sha-256': createSHA256, 'sha-512': createSHA512, md5: createMD5, sha: createSHA1 } as const
const node = { 'sha-256': 'sha256', 'sha-512': 'sha512', md5: 'md5', sha: 'sha1' } as const
type Key = keyof typeof builds
const keys = Object.keys(builds) as Key[]

t.test('states hashed through the shared instance give node:crypto\'s digests, and read back whole', async (t) => {
  const data = Buffer.from('The quick brown fox jumps over the lazy dog, and again, and again, and again: 150 bytes of it.'.repeat(2))
  for (const key of keys) {
    await prepareHasher(key)
    let state = initialState(key)
    // Two uploads interleaved on one instance do not disturb each other.
    let other = initialState(key)
    for (let at = 0; at < data.length; at += 37) {
      state = updateState(key, state, data.subarray(at, at + 37))
      other = updateState(key, other, Buffer.from('x'))
    }
    t.same(digestOfState(key, state), createHash(node[key]).update(data).digest(), key)
    t.equal(stateFault(key, storedState(key, state), data.length), null, `${key}: a stored state reads`)
    t.equal(stateFault(key, storedState(key, state), data.length + 1), `has not hashed the ${data.length + 1} bytes of its offset`)
  }
})

t.test('the layout is the installed hash-wasm build\'s: its tag and its sizes', async (t) => {
  for (const key of keys) {
    const saved = (await builds[key]()).init().save()
    t.equal(stateFault(key, storedState(key, saved), 0), null, key)
  }
})

t.test('each fault is named', async (t) => {
  await prepareHasher('md5')
  await prepareHasher('sha')
  await prepareHasher('sha-256')
  const word = (key: Key, offset: number, at: number, value: number): Uint8Array => {
    const state = Buffer.from(storedState(key, updateState(key, initialState(key), Buffer.alloc(offset, 1))))
    state.writeUInt32LE(value, at)
    return state
  }
  t.equal(stateFault('sha-256', new Uint8Array(10), 0), 'is 10 bytes, not 116')
  t.equal(stateFault('sha-256', Buffer.alloc(116), 0), 'was saved by another build of hash-wasm')
  t.equal(stateFault('sha-256', word('sha-256', 3, 108, 0xffffffff), 3), 'has a bad digest length')
  t.equal(stateFault('sha-256', word('sha-256', 3, 112, 1), 3), 'has bytes that are always zero set')
  t.equal(stateFault('sha-256', word('sha-256', 3, 40, 1), 3), 'has bytes past those hashed set')
  // md5 counts bytes in a low word below 2^29 and a high word; sha counts bits.
  t.equal(stateFault('md5', word('md5', 3, 4, 2 ** 29), 3), 'has not hashed the 3 bytes of its offset')
  t.equal(stateFault('md5', word('md5', 3, 8, 1), 2 ** 29 + 3), null, 'the high word counts 2^29 bytes')
  t.equal(stateFault('sha', word('sha', 3, 24, 3 * 8 + 1), 3), 'has not hashed the 3 bytes of its offset')
  t.equal(stateFault('sha', word('sha', 3, 24, 2 * 8), 2), 'has bytes past those hashed set', 'a count moved back over a byte hashed')
})
