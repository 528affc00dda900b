// Builds dist/ from lib/: CommonJS modules with their declarations, and the ES module entry that
// re-exports them. dist/ is emptied first, so that no file of an earlier build is packed.
import { execFileSync } from 'node:child_process'
import { rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'

const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc')
rmSync('dist', { recursive: true, force: true })
execFileSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { stdio: 'inherit' })
// The repository is "type": "module"; the built .js files are CommonJS.
writeFileSync('dist/package.json', '{ "type": "commonjs" }\n')
