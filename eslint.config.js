import neostandard from 'neostandard'

export default neostandard({
  ts: true,
  ignores: ['dist/**', 'coverage/**', '.tap/**', '.snippets/**', 'test/fixtures/resumable-conformance/**']
})
