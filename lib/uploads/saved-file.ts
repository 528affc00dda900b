/** One file request.verifiedFiles() writes: beside its destination, hashed as it is written, removed unless moved into place. */
import { randomUUID } from 'node:crypto'
import { createWriteStream, type WriteStream } from 'node:fs'
import { rm } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'
import { Transform, type Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import type { Algorithm } from '../fields/algorithms.js'
import type { SavedFile } from '../types.js'

export interface Saving {
  readonly partial: string
  readonly destination: string
  readonly writer: WriteStream
  /** Resolves with the file's size and digest once it is written. */
  readonly written: Promise<SavedFile>
}

/**
 * Writes `content` to a temporary file in the folder of `destination` (so that the move is a
 * rename), with its digest by `algorithm` taken from the bytes on their way to the file.
 */
export function saveFile (content: Readable, destination: string, algorithm: Algorithm): Saving {
  const partial = join(dirname(destination), `.${basename(destination)}.${randomUUID()}.partial`)
  const writer = createWriteStream(partial, { flags: 'wx' })
  const hash = algorithm.createHash()
  let size = 0
  const hashing = new Transform({
    transform (chunk: Buffer, _encoding, callback) {
      size += chunk.length
      hash.update(chunk)
      callback(null, chunk)
    }
  })
  const written = pipeline(content, hashing, writer)
    .then((): SavedFile => ({ destination, size, algorithm: algorithm.key, digest: hash.digest() }))
  return { partial, destination, writer, written }
}

export async function removeSaved ({ partial, writer }: Saving): Promise<void> {
  // A file still being opened would be created after it was removed: it is closed first.
  if (!writer.closed) await new Promise<void>((resolve) => writer.once('close', () => resolve()).destroy())
  await rm(partial, { force: true })
}
