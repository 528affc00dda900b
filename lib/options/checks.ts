/** The checks of option values, which throw FST_DIGEST_FIELDS_INVALID_OPTION naming where and what. */
import { invalidOption } from '../errors.js'
import { integrityFields } from '../fields/sections.js'

export function fail (where: string, message: string): never {
  throw invalidOption(where, message)
}

/** A value as a message shows it: strings quoted, numbers as written. */
export function show (value: unknown): string {
  if (typeof value === 'string') return `'${value}'`
  return typeof value === 'number' ? String(value) : String(JSON.stringify(value) ?? value)
}

export function checkKeys (where: string, options: object, allowed: readonly string[]): void {
  for (const key of Object.keys(options)) {
    if (!allowed.includes(key)) fail(where, `unknown option ${show(key)} (expected ${allowed.join(', ')})`)
  }
}

export function checkOneOf (where: string, name: string, allowed: readonly string[], value: string): void {
  if (!allowed.includes(value)) fail(where, `${name} must be one of ${allowed.join(', ')}, got ${show(value)}`)
}

export function checkBoolean (where: string, name: string, value: unknown): boolean {
  if (typeof value !== 'boolean') fail(where, `${name} must be true or false, got ${show(value)}`)
  return value
}

/** A list of the digest fields the plugin sends on responses. */
export function checkResponseFields (where: string, name: string, fields: unknown): void {
  if (!Array.isArray(fields) || !fields.every((field) => integrityFields.includes(field))) {
    fail(where, `${name} must be a list of ${integrityFields.join(', ')}, got ${show(fields)}`)
  }
}

export function checkSize (where: string, name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    fail(where, `${name} must be a whole number, got ${show(value)}`)
  }
  return value
}

export function checkTimeout (where: string, name: string, value: unknown): number {
  // setInterval() takes at most 2^31 - 1 ms.
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1 || value > 2 ** 31 - 1) {
    fail(where, `${name} must be a whole number of milliseconds from 1 to 2147483647, got ${show(value)}`)
  }
  return value
}

export function checkObject (where: string, value: unknown): asserts value is object {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    fail(where, `expected an options object, got ${show(value)}`)
  }
}
