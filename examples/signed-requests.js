// Signed requests: an RFC 9421 HTTP Message Signature that covers Content-Digest, with
// fastify-digest-fields checking the content against that digest. The signature vouches for the
// header fields only; without the digest check, anyone who can replay a signed request can send
// other content under it.
//
// `node examples/signed-requests.js` (after `npm run build`) starts the server on 127.0.0.1, sends
// a signed request, the same signed header fields with other content, and a signed request without
// Content-Digest, and prints what each got.
import { createHash, generateKeyPairSync } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { realpathSync } from 'node:fs'
import Fastify from 'fastify'
import { createSigner, createVerifier, httpbis } from 'http-message-signatures'
import fastifyDigestFields from 'fastify-digest-fields'

// What a signature must cover: content-digest binds the content, the rest binds the request.
const covered = ['@method', '@authority', '@path', 'content-type', 'content-digest']

/** A server that accepts orders signed with one of `keys` (key id to Ed25519 public key). */
export async function buildServer ({ keys, logger = false }) {
  const app = Fastify({ logger })
  // Registered first, so that its hook takes the content over before any later hook waits.
  await app.register(fastifyDigestFields, { required: true })

  // The signature covers header fields only, so it is checked as soon as they are in. The content
  // is checked by the plugin as it arrives: a handler only runs once both hold.
  app.addHook('onRequest', async (request, reply) => {
    const verified = await httpbis.verifyMessage({
      keyLookup: async ({ keyid }) => keys.has(keyid)
        ? { id: keyid, algs: ['ed25519'], verify: createVerifier(keys.get(keyid), 'ed25519') }
        : null,
      requiredFields: covered,
      requiredParams: ['created', 'keyid'],
      maxAge: 300,
      // Clocks differ a little; without it, a client 1 s ahead is refused.
      tolerance: 5,
      // The library matches required fields by name, so "content-digest";key="sha-512" (one member
      // of the field) would count: the other members, and the content they describe, would then be
      // unsigned. Refuse a signature over part of the field.
      componentParser: (name, params) => {
        if (name === 'content-digest' && params.has('key')) throw new Error('the signature must cover all of Content-Digest')
        return null
      }
    }, {
      method: request.method,
      url: `${request.protocol}://${request.host}${request.url}`,
      headers: request.headers
    }).catch(() => false)
    if (verified !== true) {
      return reply.code(401).type('application/problem+json').send({
        type: 'about:blank',
        title: 'Unauthorized',
        detail: `a valid signature covering ${covered.join(', ')} is required`
      })
    }
  })

  app.post('/orders', async (request) => ({ accepted: request.body, verified: request.digest?.fields }))
  return app
}

/**
 * The header fields of a signed POST of `body` to `url`: Content-Digest (sha-256) unless
 * `withDigest` is false, and Signature-Input and Signature over them.
 */
export async function signedHeaders ({ url, body, privateKey, keyid, withDigest = true }) {
  const headers = { 'content-type': 'application/json' }
  if (withDigest) headers['content-digest'] = `sha-256=:${createHash('sha256').update(body).digest('base64')}:`
  const signed = await httpbis.signMessage({
    key: createSigner(privateKey, 'ed25519', keyid),
    fields: covered.filter((field) => field.startsWith('@') || field in headers)
  }, { method: 'POST', url, headers })
  return signed.headers
}

async function demonstrate () {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519')
  const app = await buildServer({ keys: new Map([['client-1', publicKey]]) })
  const origin = await app.listen({ host: '127.0.0.1', port: 0 })
  const url = `${origin}/orders`
  const order = JSON.stringify({ item: 'book', quantity: 1 })
  const send = async (label, headers, body) => {
    const response = await fetch(url, { method: 'POST', headers, body })
    console.log(`${label}: ${response.status} ${await response.text()}`)
  }
  try {
    const headers = await signedHeaders({ url, body: order, privateKey, keyid: 'client-1' })
    await send('signed', headers, order)
    await send('same signature, other content', headers, JSON.stringify({ item: 'book', quantity: 100 }))
    await send('signed without Content-Digest', await signedHeaders({ url, body: order, privateKey, keyid: 'client-1', withDigest: false }), order)
  } finally {
    await app.close()
  }
}

// Run directly, not imported (compared as real paths, as the upload example does).
if (realpathSync(process.argv[1] ?? '') === realpathSync(fileURLToPath(import.meta.url))) await demonstrate()
