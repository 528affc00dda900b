// A lock on each upload that lives in the uploads' folder, so that several servers on one folder
// (processes, or instances in one process) take an upload's requests one at a time
// (draft-ietf-httpbis-resumable-upload-15, "Concurrency"). In the folder's `.locks`, the holder is
// `<id>.lock`, created exclusively, naming its instance and process; a request of another instance
// asks it to give way by writing `<id>.takeover`, which the holder's instance watches for, then
// waits (bounded) for the lock. The holder renews its lock every second: a lock whose process is
// gone (a crash, a kill), or that nobody renewed for 10 s (a pid used again, another machine's
// process on a shared folder), is taken over.
import { randomUUID } from 'node:crypto'
import { mkdirSync, readFileSync, watch } from 'node:fs'
import { link, readFile, rename, rm, stat, utimes, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { setTimeout as delay } from 'node:timers/promises'

// How often a request waiting on another instance looks again, and for how long it waits at most.
const pollMs = 10
const maxWaitMs = 30_000
// How often a holder renews its locks, and how long a lock nobody renewed stays another's.
const renewMs = 1000
const staleMs = 10_000

function processExists (pid) {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return error.code === 'EPERM'
  }
}

/** Takes a stale lock: renamed aside first, so that only that lock is removed. */
async function removeStale (path, holder) {
  const aside = `${path}.${randomUUID()}.stale`
  if (await rename(path, aside).then(() => true, () => false)) {
    // Another instance's fresh lock renamed in a race is put back where it was.
    if (await readFile(aside, 'utf8') !== holder) await link(aside, path).catch(() => {})
    await rm(aside, { force: true })
  }
}

/** The instance that asks for an upload in its takeover file, or null once the file is gone. */
function readAsk (path) {
  try {
    return readFileSync(path, 'latin1').split(' ')[0]
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
  // This server's own name in the locks it holds and the asks it makes.
  #instance = randomUUID()
  // The upload ids this instance holds, each with what gives it up to a request elsewhere.
  #held = new Map()
  #watcher
  #renewal

  constructor (uploads) {
    const folder = join(uploads, '.locks')
    mkdirSync(folder, { recursive: true })
    this.#folder = folder
    this.#watcher = watch(folder, (_event, name) => {
      const id = /^([0-9a-f]{32})\.takeover$/.exec(String(name))?.[1]
      if (id === undefined || !this.#held.has(id)) return
      // Its removal, once the newer request holds the upload, is an event too; and an ask of this
      // instance's own, heard late, is not one to give way to (within an instance UploadLocks decides).
      const asker = readAsk(join(folder, String(name)))
      if (asker !== null && asker !== this.#instance) this.#held.get(id)()
    })
    this.#renewal = setInterval(() => {
      const now = new Date()
      for (const id of this.#held.keys()) utimes(join(folder, `${id}.lock`), now, now).catch(() => {})
    }, renewMs).unref()
  }

  close () {
    this.#watcher.close()
    clearInterval(this.#renewal)
  }

  /** Whether the lock at `path`, holding `holder`, is still someone's. */
  async #alive (path, holder, id) {
    const { pid, instance } = JSON.parse(holder)
    if (instance === this.#instance) return this.#held.has(id)
    if (pid !== process.pid && !processExists(pid)) return false
    // Its process may be another with the same pid, or on another machine: a holder renews its lock.
    const renewed = await stat(path).then(({ mtimeMs }) => mtimeMs, () => Date.now())
    return Date.now() - renewed < staleMs
  }

  /**
   * Holds upload `id` across instances; resolves with the function that lets it go, or with null
   * if `signal` ended the request first. `giveWay` is called when a request of another instance
   * asks for the upload.
   */
  async hold (id, giveWay, signal) {
    const path = join(this.#folder, `${id}.lock`)
    const takeover = join(this.#folder, `${id}.takeover`)
    const mine = JSON.stringify({ pid: process.pid, instance: this.#instance, token: randomUUID() })
    const release = async () => {
      if (this.#held.get(id) === giveWay) this.#held.delete(id)
      // Only its own lock: one taken over as stale is another's now.
      if (await readFile(path, 'utf8').catch(() => null) === mine) await rm(path, { force: true })
    }
    let asked = false
    try {
      for (let polls = 0, started = Date.now(); !signal.aborted; polls++) {
        if (await create(path, mine)) {
          if (signal.aborted) {
            await release()
            return null
          }
          // Held before anything else is awaited, so that a request elsewhere that asks at once is heard.
          this.#held.set(id, giveWay)
          return release
        }
        const holder = await readFile(path, 'utf8').catch(() => null)
        if (holder !== null && !await this.#alive(path, holder, id)) {
          await removeStale(path, holder)
          continue
        }
        // Asked again now and then, with new content so that the holder's instance sees a change: a
        // holder that took the lock as the first ask came saw none.
        if (polls % 50 === 0) await writeFile(takeover, `${this.#instance} ${polls}`)
        asked = true
        if (Date.now() - started > maxWaitMs) throw Object.assign(new Error('another server holds the upload'), { statusCode: 503 })
        await delay(pollMs)
      }
      return null
    } finally {
      if (asked) await rm(takeover, { force: true })
    }
  }
}
