/** @fastify/static's setHeaders: each file it serves marked, so that the plugin sends the file's digests. */
import type { FastifyReply } from 'fastify'
import type { Stats } from 'node:fs'
import type { StaticFileDigestsOptions } from '../types.js'
import { invalidOption } from '../errors.js'
import { checkResponseFields } from '../options/checks.js'
import { replyState } from './reply-state.js'

/**
 * A `setHeaders` for @fastify/static (10 or later, which hands it the reply): every file it
 * serves, HEAD and 304 answers included, sends `responseDigests` unasked, from the file digest
 * cache and so in the header section.
 */
export function staticFileDigests (options: StaticFileDigestsOptions = {}):
(reply: FastifyReply, path: string, stat: Stats) => void {
  const { responseDigests = ['repr-digest', 'content-digest', 'unencoded-digest'], setHeaders } = options
  checkResponseFields('staticFileDigests', 'responseDigests', responseDigests)
  if (setHeaders !== undefined && typeof setHeaders !== 'function') {
    throw invalidOption('staticFileDigests', 'setHeaders must be a function')
  }
  const fields = [...responseDigests]
  return function setDigestHeaders (reply, path, stat) {
    replyState(reply).servedFile = { path, fields }
    setHeaders?.(reply, path, stat)
  }
}
