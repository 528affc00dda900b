// A lock on each upload that lives in the uploads' folder, so that several processes serving one
// folder take an upload's requests one at a time (draft-ietf-httpbis-resumable-upload-15,
// "Concurrency"). In the folder's `.locks`, the holder is `<id>.lock`, created exclusively, naming
// its process; a request in another process asks it to give way by creating `<id>.takeover`, which
// the holder's process watches for, then waits (bounded) for the lock. Processes on one machine: a
// lock whose process is gone (a crash, a kill) is taken over.
import { randomUUID } from 'node:crypto'
import { mkdirSync, readFileSync, watch } from 'node:fs'
import { link, readFile, rename, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { setTimeout as delay } from 'node:timers/promises'

// How often a request waiting on another process looks again, and for how long it waits at most.
const pollMs = 10
const maxWaitMs = 30_000

function alive (holder, held) {
  const { pid } = JSON.parse(holder)
  // A lock of this process that it does not hold is one a process with the same pid left.
  if (pid === process.pid) return held
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return error.code === 'EPERM'
  }
}

/** Takes a lock whose process is gone: renamed aside first, so that only that lock is removed. */
async function removeStale (path, holder) {
  const aside = `${path}.${randomUUID()}.stale`
  if (await rename(path, aside).then(() => true, () => false)) {
    // Another process's fresh lock renamed in a race is put back where it was.
    if (await readFile(aside, 'utf8') !== holder) await link(aside, path).catch(() => {})
    await rm(aside, { force: true })
  }
}

/** The process that asks for an upload in its takeover file, or null once the file is gone. */
function readAsk (path) {
  try {
    return Number(readFileSync(path, 'latin1').split(' ')[0])
  } catch {
    return null
  }
}

/** Creates `path` holding `content` unless it exists: linked from a file written first, so never seen empty. */
async function create (path, content) {
  const written = `${path}.${randomUUID()}.new`
  await writeFile(written, content)
  try {
    return await link(written, path).then(() => true, (error) => {
      if (error.code !== 'EEXIST') throw error
      return false
    })
  } finally {
    await rm(written, { force: true })
  }
}

export class FolderLocks {
  #folder
  // The upload ids this process holds, each with what gives it up to a request elsewhere.
  #held = new Map()
  #watcher

  constructor (uploads) {
    const folder = join(uploads, '.locks')
    mkdirSync(folder, { recursive: true })
    this.#folder = folder
    this.#watcher = watch(folder, (_event, name) => {
      const id = /^([0-9a-f]{32})\.takeover$/.exec(String(name))?.[1]
      if (id === undefined || !this.#held.has(id)) return
      // Its removal, once the newer request holds the upload, is an event too; and an ask of this
      // process's own, heard late, is not one to give way to (within a process UploadLocks decides).
      const asker = readAsk(join(folder, String(name)))
      if (asker !== null && asker !== process.pid) this.#held.get(id)()
    })
  }

  close () {
    this.#watcher.close()
  }

  /**
   * Holds upload `id` across processes; resolves with the function that lets it go, or with null
   * if `signal` ended the request first. `giveWay` is called when a request in another process asks
   * for the upload.
   */
  async hold (id, giveWay, signal) {
    const path = join(this.#folder, `${id}.lock`)
    const takeover = join(this.#folder, `${id}.takeover`)
    const mine = JSON.stringify({ pid: process.pid, token: randomUUID() })
    const release = async () => {
      if (this.#held.get(id) === giveWay) this.#held.delete(id)
      // Only its own lock: one taken over as stale is another's now.
      if (await readFile(path, 'utf8').catch(() => null) === mine) await rm(path, { force: true })
    }
    let asked = false
    for (let polls = 0, started = Date.now(); !signal.aborted; polls++) {
      const created = await create(path, mine)
      if (created) {
        // Held before anything else is awaited, so that a request elsewhere that asks at once is heard.
        if (!signal.aborted) this.#held.set(id, giveWay)
        if (asked) await rm(takeover, { force: true })
        if (!signal.aborted) return release
        await release()
        return null
      }
      const holder = await readFile(path, 'utf8').catch(() => null)
      if (holder !== null && !alive(holder, this.#held.has(id))) {
        await removeStale(path, holder)
        continue
      }
      // Asked again now and then, with new content so that the holder's process sees a change: a
      // holder that took the lock as the first ask came saw none.
      if (polls % 50 === 0) await writeFile(takeover, `${process.pid} ${polls}`)
      asked = true
      if (Date.now() - started > maxWaitMs) throw Object.assign(new Error('another process holds the upload'), { statusCode: 503 })
      await delay(pollMs)
    }
    if (asked) await rm(takeover, { force: true })
    return null
  }
}
