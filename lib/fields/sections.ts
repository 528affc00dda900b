/** Header and trailer sections as Node gives them, and the names of the fields both ends look for in them. */
import type { DigestFieldName } from '../types.js'

/** A header or trailer section, as Node gives it. */
export type Section = Readonly<Record<string, string | string[] | undefined>>

/** The integrity fields (RFC 9530 sections 2 and 3, and Unencoded-Digest), by the names Node gives them. */
export const integrityFields: readonly DigestFieldName[] = ['content-digest', 'repr-digest', 'unencoded-digest']

export function isIntegrityField (name: string): name is DigestFieldName {
  return (integrityFields as readonly string[]).includes(name)
}

/** The members of a list-based field (RFC 9110 section 5.6.1), in lower case. */
export function listMembers (field: string): string[] {
  return field.toLowerCase().split(',').map((member) => member.trim())
}
