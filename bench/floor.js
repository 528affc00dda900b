// The floor of issue 29: the least code that keeps the plugin's guarantee for the common case, a
// request with one sha-256 or sha-512 Content-Digest or Repr-Digest (no content coding, no range)
// and nothing else to judge. It takes request.raw's push() over in onRequest, hashes every chunk
// before any reader has it (a body of one chunk in one call at its end), holds the last kilobyte
// and the end back until the digest compares equal, and fails the stream on a mismatch; a parser
// that read part of the content, and a success reply sent early, wait for the verdict. Everything
// the plugin does besides (other fields, framings, codings, trailers, problem documents, stalled
// readers) is left out: `npm run bench` measures the plugin against it as the cost of the
// guarantee alone. Not a plugin to use.
import { createHash, hash, timingSafeEqual } from 'node:crypto'

const field = /^(sha-256|sha-512)=:([A-Za-z0-9+/]+={0,2}):$/
const names = { 'sha-256': 'sha256', 'sha-512': 'sha512' }
const tail = 1024
const nothing = Buffer.alloc(0)
const kCheck = Symbol('floor check')
const badRequest = (detail) => Object.assign(new Error(detail), { statusCode: 400 })

class Check {
  settled = false
  failure = null
  #waiters = []
  #hash = null
  #only = null
  #held = []
  #heldLength = 0

  constructor (source, algorithm, expected) {
    this.source = source
    this.algorithm = algorithm
    this.expected = expected
    this.push = source.push
  }

  receive (chunk) {
    const push = this.push
    const source = this.source
    if (chunk === null) {
      source.push = push
      const digest = this.#hash === null ? hash(this.algorithm, this.#only ?? nothing, 'buffer') : this.#hash.digest()
      const verified = digest.length === this.expected.length && timingSafeEqual(digest, this.expected)
      this.settled = true
      if (!verified) {
        this.failure = badRequest('Mismatching digest')
        source.destroy(this.failure)
      } else {
        for (const held of this.#held) push.call(source, held)
        push.call(source, null)
      }
      for (const waiter of this.#waiters) waiter(this.failure)
      return false
    }
    if (this.#hash === null && this.#only === null) {
      this.#only = chunk
    } else {
      if (this.#hash === null) {
        this.#hash = createHash(this.algorithm).update(this.#only)
        this.#only = nothing
      }
      this.#hash.update(chunk)
    }
    const held = this.#held
    held.push(chunk)
    this.#heldLength += chunk.length
    let more = null
    while (this.#heldLength - held[0].length >= tail) {
      const next = held.shift()
      this.#heldLength -= next.length
      more = push.call(source, next)
    }
    return more ?? push.call(source, nothing)
  }

  whenSettled (waiter) {
    this.#waiters.push(waiter)
    this.source.resume()
  }
}

function pushThroughCheck (chunk) {
  return this[kCheck].receive(chunk)
}

/**
 * `bytes` of small objects (about 42 bytes each with its slot, by --trace-gc on Node 24), kept as long
 * as the request: what a request's extra allocation costs by itself, with few instructions.
 */
function ballastOf (bytes) {
  const objects = new Array(Math.round(bytes / 42))
  for (let i = 0; i < objects.length; i++) objects[i] = { i }
  return objects
}

/**
 * Registers the floor's hooks on a Fastify instance. With `ballast` (bytes), a request with a digest
 * also allocates that much more, kept until its response: the plugin allocates more than the floor,
 * and this measures what that alone costs.
 */
export function floor (app, { ballast = 0 } = {}) {
  app.decorateRequest(kCheck, null)
  app.addHook('onRequest', (request, _reply, done) => {
    const header = request.headers['content-digest'] ?? request.headers['repr-digest']
    if (header === undefined) return done()
    const match = field.exec(header)
    if (match === null) return done(badRequest('Unsupported digest field'))
    const source = request.raw
    const check = new Check(source, names[match[1]], Buffer.from(match[2], 'base64'))
    // Only floor-allocating's checks carry it: the floor's own stay as they were.
    if (ballast > 0) check.ballast = ballastOf(ballast)
    request[kCheck] = check
    source[kCheck] = check
    source.push = pushThroughCheck
    done()
  })
  app.addHook('preValidation', (request, _reply, done) => {
    const check = request[kCheck]
    if (check === null || check.settled || !request.raw.readableDidRead) return done()
    check.whenSettled((failure) => done(failure ?? undefined))
  })
  app.addHook('onSend', (request, reply, payload, done) => {
    const check = request[kCheck]
    if (check === null || reply.statusCode >= 400) return done(null, payload)
    if (check.settled) return done(check.failure, payload)
    check.whenSettled((failure) => done(failure, payload))
  })
}
