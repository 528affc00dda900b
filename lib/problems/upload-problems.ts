/**
 * The problems of draft-ietf-httpbis-resumable-upload-15 (section 7), its own types whatever
 * `problemTypes` and `disclosure` say: the server's offset and the length are the client's to know.
 */
import { problemCodes } from '../errors.js'
import type { Settings } from '../options/settings.js'
import { DigestProblem } from './digest-problem.js'
import { inconsistentUploadLengthSchema, mismatchingUploadOffsetSchema } from './schemas.js'

function draftProblem (settings: Settings, problem: DigestProblem, code: DigestProblem['code']): DigestProblem {
  problem.code = code
  problem.logMessage = problem.message
  problem.logLevel = settings.problemLogLevel
  return problem
}

/** The 409 answer to an append at an offset other than the upload's (section 7.1). */
export function mismatchingUploadOffset (settings: Settings, expected: number, provided: number | null): DigestProblem {
  const type = `${settings.typeBase}mismatching-upload-offset`
  const title = 'offset from request does not match offset of resource'
  const document = { type, title, 'expected-offset': expected, ...(provided === null ? {} : { 'provided-offset': provided }) }
  const headers = { 'upload-offset': String(expected), 'upload-complete': '?0' }
  return draftProblem(settings, new DigestProblem(type, `${title}: expected ${expected}, got ${provided ?? 'none'}`,
    document as never, mismatchingUploadOffsetSchema as never, headers, 409), problemCodes[409])
}

/** The answer to length indications that disagree, or content past the length (section 7.2). */
export function inconsistentUploadLength (settings: Settings, detail: string): DigestProblem {
  const type = `${settings.typeBase}inconsistent-upload-length`
  const title = 'inconsistent length values for upload'
  return draftProblem(settings, new DigestProblem(type, `${title}: ${detail}`, { type, title } as never,
    inconsistentUploadLengthSchema as never, { 'upload-complete': '?0' }, 400), problemCodes.inconsistentLength)
}
