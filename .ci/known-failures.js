// Compares the failures of a tap run (its TAP output) with a list of failures each named with the
// fault outside this project that causes it. Prints the unlisted failures and exits 1 if there is
// one; prints the listed ones that passed, so that the list shrinks when the fault is fixed.
// Usage: node .ci/known-failures.js <tap output> <list.json>
import { readFileSync } from 'node:fs'

/** The failed top-level subtests of each test file, as "file » subtest" (the file alone if it failed bare, or » timeout). */
export function failuresOf (tap) {
  const failed = []
  let file = null
  let subtests = 0
  for (const line of tap.split('\n')) {
    const opened = /^# Subtest: (\S+)$/.exec(line)
    if (opened !== null) {
      file = opened[1]
      subtests = 0
      continue
    }
    const inner = /^ {4}not ok \d+ - (.*?)(?: # time=[\d.]+m?s)?$/.exec(line)
    if (inner !== null && file !== null) {
      failed.push(`${file} » ${inner[1]}`)
      subtests++
      continue
    }
    // The run's own timeout names the file it stopped on a line below.
    const expired = /^ {2}expired: (\S+)$/.exec(line)
    if (expired !== null) failed.push(`${expired[1]} » timeout`)
    const outer = /^not ok \d+ - (\S+)/.exec(line)
    if (outer !== null && subtests === 0 && outer[1] !== 'timeout!') failed.push(outer[1])
  }
  return failed
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const failed = failuresOf(readFileSync(process.argv[2], 'utf8'))
  const { causes, failures } = JSON.parse(readFileSync(process.argv[3], 'utf8'))
  const listed = new Map(failures.map(({ test, cause }) => [test, cause]))
  const unlisted = failed.filter((test) => !listed.has(test))
  for (const test of failed.filter((test) => listed.has(test))) console.log(`# known failure: ${test}\n#   ${causes[listed.get(test)]}`)
  for (const test of [...listed.keys()].filter((test) => !failed.includes(test))) console.log(`# listed failure that passed: ${test}`)
  for (const test of unlisted) console.log(`# UNLISTED FAILURE: ${test}`)
  process.exitCode = unlisted.length === 0 ? 0 : 1
}
