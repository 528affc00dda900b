/**
 * What of a request's content its readers are not given until the verdict: the last kilobyte
 * received, or of a length the connection enforces only its last kilobyte, and a multipart body
 * from its close delimiter on.
 */
const nothing = Buffer.alloc(0)
const crlf = Buffer.from('\r\n')

// More than any multipart close delimiter (RFC 2046 section 5.1.1: a boundary has at most 70
// characters), so that a reader that knows where the content ends from its own framing (a JSON
// value, a length) never holds all of it before it is verified.
const tailLength = 1024

// What may follow a multipart body's close delimiter (an epilogue, RFC 2046 section 5.1.1, which
// readers ignore) while it is held: content with more is refused, and the rest not kept.
export const maxEpilogue = 64 * 1024

export class HeldContent {
  // TypeScript-private, not #private: made for every request with a digest (docs/development.md).
  private readonly closeDelimiter: Buffer | null
  private held: Buffer[] = []
  private heldLength = 0
  // The last bytes scanned for the close delimiter (a copy: readers may change theirs); once it was
  // seen, what is held from it on, and how many bytes came after its end.
  private scanned: Buffer = nothing
  private closing: Buffer[] | null = null
  private afterClose = 0
  // Of content whose `length` (still to arrive) the connection enforces, the bytes before its last
  // kilobyte not yet given: that kilobyte must arrive or the request is cut short, so readers have them
  // as they arrive (a chunk taken above 0 may reach them at once: content-hashes.ts); else NaN. The last
  // bytes received that may begin a close delimiter stay held all the same: a reader ends its part there.
  releasable: number

  constructor (closeDelimiter: Buffer | null, length = NaN) {
    this.closeDelimiter = closeDelimiter
    this.releasable = length - tailLength
    // A body may open with its close delimiter: the CRLF before it is taken as read.
    if (closeDelimiter !== null) this.scanned = crlf
  }

  /** Whether more followed the close delimiter than is held: the content is then refused. */
  get overflowed (): boolean {
    return this.afterClose > maxEpilogue
  }

  /**
   * Takes a chunk and hands `deliver`, called on `target` (a request stream's own push() on the
   * stream: no closure a request), what readers may have now; returns what the last delivery
   * returned, or null when there was none.
   */
  take<T> (bytes: Buffer, deliver: (this: T, chunk: Buffer) => boolean, target: T): boolean | null {
    if (this.closing !== null) {
      this.holdAfterClose(bytes)
      return null
    }
    const delimiter = this.closeDelimiter
    const start = delimiter === null ? null : this.closeDelimiterStart(bytes, delimiter)
    if (start === null) return this.hold(bytes, deliver, target)
    // Its last part would end for a reader at the delimiter, however long an epilogue follows: the
    // chunk is split there, what comes before held as any other chunk, the rest until the verdict.
    this.closing = []
    this.afterClose = -((delimiter as Buffer).length + Math.min(0, start))
    this.holdAfterClose(bytes.subarray(Math.max(0, start)))
    return this.hold(bytes.subarray(0, Math.max(0, start)), deliver, target)
  }

  /** Everything held, in order, for readers once the content is verified. */
  release (): Buffer[] {
    const held = this.closing === null ? this.held : [...this.held, ...this.closing]
    this.held = []
    this.closing = null
    return held
  }

  private hold<T> (bytes: Buffer, deliver: (this: T, chunk: Buffer) => boolean, target: T): boolean | null {
    const held = this.held
    held.push(bytes)
    this.heldLength += bytes.length
    let more: boolean | null = null
    while (held.length > 0) {
      let next = held[0] as Buffer
      const free = Math.min(this.releasable, this.heldLength - (this.closeDelimiter?.length ?? 1) + 1)
      if (this.heldLength - next.length >= tailLength || next.length <= free) {
        held.shift()
      } else if (free > 0) {
        held[0] = next.subarray(free)
        next = next.subarray(0, free)
      } else break
      this.heldLength -= next.length
      this.releasable -= next.length
      more = deliver.call(target, next)
    }
    return more
  }

  // Past the bound nothing more is kept, since the content is refused at its end.
  private holdAfterClose (bytes: Buffer): void {
    const closing = this.closing as Buffer[]
    this.afterClose += bytes.length
    if (this.overflowed) closing.length = 0
    else closing.push(bytes)
  }

  // Where in the chunk the delimiter starts (below 0 when it began in the bytes before it), or
  // null; keeps a copy of the chunk's last bytes for the next search.
  private closeDelimiterStart (bytes: Buffer, delimiter: Buffer): number | null {
    const before = this.scanned
    const edge = Buffer.concat([before, bytes.subarray(0, delimiter.length - 1)]).indexOf(delimiter)
    if (edge !== -1) return edge - before.length
    const within = bytes.indexOf(delimiter)
    if (within !== -1) return within
    const last = Buffer.concat([before, bytes.subarray(-(delimiter.length - 1))])
    this.scanned = last.subarray(Math.max(0, last.length - (delimiter.length - 1)))
    return null
  }
}
