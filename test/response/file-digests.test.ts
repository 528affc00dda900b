import { createHash } from 'node:crypto'
import { once } from 'node:events'
import { close, createReadStream, mkdtempSync, open, read, renameSync, rmSync, unlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import t from 'tap'
import { lookupAlgorithm, type Algorithm } from '../../lib/fields/algorithms.js'
import { FileDigests } from '../../lib/response/file-digests.js'

// The file digest cache on its own: what it answers when a file or the stream reading it changes
// under it. A digest is either the file's as it is, or nothing.

const sha256 = lookupAlgorithm('sha-256') as Algorithm
const sha512 = lookupAlgorithm('sha-512') as Algorithm
const folder = mkdtempSync(join(tmpdir(), 'file-digests-'))
t.teardown(() => rmSync(folder, { recursive: true, force: true }))
const limits = { hashBeforeSending: 1024 * 1024, maxEntries: 100 }

function file (name: string, content: string | Buffer): string {
  const path = join(folder, name)
  writeFileSync(path, content)
  return path
}

async function opened (path: string, options?: { start?: number, end?: number }): Promise<ReturnType<typeof createReadStream>> {
  const stream = createReadStream(path, options)
  await once(stream, 'ready')
  t.teardown(() => stream.destroy())
  return stream
}

t.test('a stream over the file gives the digests of the file it opened', async (t) => {
  const path = file('whole.txt', 'whole file')
  const found = await new FileDigests(limits).digests({ path, stream: await opened(path) }, [sha256], [], false)
  t.same(found?.values?.get(sha256), createHash('sha256').update('whole file').digest())
})

t.test('a stream not open yet is waited for; one that cannot open gives nothing, and no uncaught error', async (t) => {
  const path = file('opening.txt', 'opening')
  const opening = createReadStream(path)
  const found = await new FileDigests(limits).digests({ path, stream: opening }, [sha256], [], false)
  t.same(found?.values?.get(sha256), createHash('sha256').update('opening').digest())
  opening.destroy()
  const missing = join(folder, 'missing.txt')
  t.equal(await new FileDigests(limits).digests({ path: missing, stream: createReadStream(missing) }, [sha256], [], false), null, 'a file that is not there')
  const early = createReadStream(path)
  const before = new FileDigests(limits).digests({ path, stream: early }, [sha256], [], false)
  early.destroy()
  t.equal(await before, null, 'a stream closed before it opened')
})

t.test('a stream over part of the file is not the file: what it sent is only checked for its length', async (t) => {
  const path = file('part.txt', 'part of a file')
  const from = await new FileDigests(limits).digests({ path, stream: await opened(path, { start: 2 }) }, [sha256], [], false)
  t.equal(from?.values, null)
  t.equal(await from?.settle(null, 12), true, 'the 12 bytes from the third')
  t.equal(await from?.settle(null, 11), false, 'a byte short')
  const to = await new FileDigests(limits).digests({ path, stream: await opened(path, { end: 3 }) }, [sha256], [], false)
  t.equal(to?.values, null)
  t.equal(await to?.settle(null, 4), true, 'the first 4 bytes')
})

t.test('a stream that closed, or closes while its file is looked at, gives nothing', async (t) => {
  const path = file('closing.txt', 'closing')
  const closed = await opened(path)
  closed.destroy()
  await once(closed, 'close')
  t.equal(await new FileDigests(limits).digests({ path, stream: closed }, [sha256], [], false), null, 'closed before')
  const closing = await opened(path)
  const found = new FileDigests(limits).digests({ path, stream: closing }, [sha256], [], false)
  closing.destroy()
  t.equal(await found, null, 'closed during')
  // Whether the descriptor closes before fstat reads it is a race: a close held back until the
  // stats came makes the stream's own destroyed flag the only thing that can refuse them.
  let release = (): void => {}
  const held = createReadStream(path, {
    fs: { open, read, close: (fd: number, done: (error: Error | null) => void) => { release = () => close(fd, done) } }
  })
  await once(held, 'ready')
  const heldFound = new FileDigests(limits).digests({ path, stream: held }, [sha256], [], false)
  held.destroy()
  t.equal(await heldFound, null, 'closed during, its descriptor still open')
  release()
  await once(held, 'close')
})

t.test('a file removed or replaced after its stream opened it is not hashed by its path', async (t) => {
  const removed = file('removed.txt', 'removed')
  const removedStream = await opened(removed)
  unlinkSync(removed)
  t.equal(await new FileDigests(limits).digests({ path: removed, stream: removedStream }, [sha256], [], false), null, 'removed')
  const replaced = file('replaced.txt', 'the first version')
  const replacedStream = await opened(replaced)
  renameSync(file('replacement.txt', 'the second version'), replaced)
  t.equal(await new FileDigests(limits).digests({ path: replaced, stream: replacedStream }, [sha256], [], false), null, 'replaced: the stream still reads the first version')
  const now = await new FileDigests(limits).digests({ path: replaced }, [sha256], [], false)
  t.same(now?.values?.get(sha256), createHash('sha256').update('the second version').digest(), 'the path is the second')
})

t.test('a file that does not decode has no unencoded digest', async (t) => {
  const path = file('broken.js.gz', 'not gzip')
  t.equal(await new FileDigests(limits).digests({ path }, [sha256], ['gzip'], false), null)
  const coded = file('coded.js.gz', gzipSync('decoded'))
  const found = await new FileDigests(limits).digests({ path: coded }, [sha256], ['gzip'], false)
  t.same(found?.values?.get(sha256), createHash('sha256').update('decoded').digest())
})

t.test('a settled file keeps every algorithm asked for, each hashed once', async (t) => {
  // A committed fixture has settled; a file written now has not.
  const path = new URL('../fixtures/static/style.css', import.meta.url).pathname
  const files = new FileDigests(limits)
  const first = await files.digests({ path }, [sha256], [], false)
  const both = await files.digests({ path }, [sha512, sha256], [], false)
  t.same(both?.values?.get(sha256), first?.values?.get(sha256))
  t.same([...both?.values?.keys() ?? []].map((algorithm) => algorithm.key).sort(), ['sha-256', 'sha-512'])
  const again = await files.digests({ path }, [sha512], [], false)
  t.same(again?.values, both?.values, 'the same digests, from the cache')
})

t.test('a large file is left to be hashed as it is sent, and remembered only if unchanged after', async (t) => {
  const path = file('large.bin', Buffer.alloc(4096, 1))
  const files = new FileDigests({ hashBeforeSending: 1024, maxEntries: 10 })
  const found = await files.digests({ path }, [sha256], [], false)
  t.equal(found?.values, null, 'not hashed before sending')
  t.equal(await found?.settle(new Map([[sha256, Buffer.alloc(32)]]), 4095), false, 'a byte short is not the version')
  writeFileSync(path, Buffer.alloc(4096, 2))
  t.equal(await found?.settle(new Map([[sha256, Buffer.alloc(32)]]), 4096), false, 'a file changed after is not the version')
  const after = await files.digests({ path }, [sha256], [], true)
  t.same(after?.values?.get(sha256), createHash('sha256').update(Buffer.alloc(4096, 2)).digest(), 'the file as it is now')
})

t.test('a file that ends before its size, as read, gives nothing', async (t) => {
  const real = await import('node:fs/promises')
  const { FileDigests: Shortened } = await t.mockImport<typeof import('../../lib/response/file-digests.js')>('../../lib/response/file-digests.js', {
    'node:fs/promises': {
      ...real,
      open: async (...args: Parameters<typeof real.open>) => {
        const handle = await real.open(...args)
        // Reads as if the file had been cut after its first 10 bytes.
        const read = handle.read.bind(handle)
        return Object.assign(handle, {
          read: async (buffer: Buffer, offset: number, length: number, position: number) =>
            position >= 10 ? { bytesRead: 0, buffer } : await read(buffer, offset, Math.min(length, 10 - position), position)
        })
      }
    }
  })
  const path = file('shortened.txt', 'twenty bytes of text')
  t.equal(await new Shortened(limits).digests({ path }, [sha256], [], false), null)
})
