/** Signature-based SRI (WICG): an RFC 9421 signature over Unencoded-Digest, tagged ed25519-integrity. */
import { createPrivateKey, createPublicKey, sign, type KeyObject } from 'node:crypto'
import { invalidOption } from '../errors.js'

/** The two fields that sign one Unencoded-Digest value. */
export interface IntegritySignature {
  readonly 'signature-input': string
  readonly signature: string
}

export interface IntegritySigner {
  /** The base64 of the raw public key: the `keyid`, and what follows `ed25519-` in an `integrity` attribute. */
  readonly keyid: string
  signatureOf (unencodedDigest: string): IntegritySignature
}

// Signatures kept by digest, so that a busy asset is signed once; more distinct digests than this
// are signed again when they come back.
const maxRemembered = 4096

function privateKeyOf (where: string, privateKey: unknown): KeyObject {
  let key: KeyObject | null = null
  try {
    key = typeof privateKey === 'string' || Buffer.isBuffer(privateKey)
      ? createPrivateKey(privateKey)
      : (privateKey as KeyObject)
  } catch {}
  if (key?.type !== 'private' || key.asymmetricKeyType !== 'ed25519') {
    throw invalidOption(where, 'integritySignatures.privateKey must be an Ed25519 private KeyObject or PEM')
  }
  return key
}

/**
 * Signs Unencoded-Digest values as Chromium checks them: the signature base of RFC 9421 section
 * 2.5 over the field as a structured field (`;sf`) and the signature parameters, with no `alg`
 * (which makes Chromium drop the signature) and no expiry.
 */
export function integritySigner (where: string, options: unknown): IntegritySigner {
  if (typeof options !== 'object' || options === null || Object.keys(options).join() !== 'privateKey') {
    throw invalidOption(where, 'integritySignatures must be { privateKey } or false')
  }
  const key = privateKeyOf(where, (options as { privateKey: unknown }).privateKey)
  const { x } = createPublicKey(key).export({ format: 'jwk' })
  const keyid = Buffer.from(x as string, 'base64url').toString('base64')
  const parameters = `("unencoded-digest";sf);keyid="${keyid}";tag="ed25519-integrity"`
  const signed = new Map<string, IntegritySignature>()
  return {
    keyid,
    signatureOf (unencodedDigest) {
      let known = signed.get(unencodedDigest)
      if (known === undefined) {
        const base = `"unencoded-digest";sf: ${unencodedDigest}\n"@signature-params": ${parameters}`
        const signature = sign(null, Buffer.from(base), key).toString('base64')
        known = { 'signature-input': `sig=${parameters}`, signature: `sig=:${signature}:` }
        if (signed.size >= maxRemembered) signed.delete(signed.keys().next().value as string)
        signed.set(unencodedDigest, known)
      }
      return known
    }
  }
}
