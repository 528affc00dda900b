// tap measures coverage of lib/ only, and fails the run below 100% of its lines, branches and
// functions: the examples, benchmarks and built output are not part of the bar.
export default () => 'lib/**/*.ts'
