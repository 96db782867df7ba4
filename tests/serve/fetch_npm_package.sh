#!/usr/bin/env bash
# Fixture of the tests that drive rudder serve from JavaScript (serve.playground: playwright-core, which drives Debian's
# chromium without its own browser downloads; serve.openai: OpenAI's official client): installs one npm package into
# the build tree. Exits 0 without it, saying why, when node or npm is missing or the install fails: the test then skips
# with the same reason.
# Usage: fetch_npm_package.sh NPM_DIR NAME@VERSION
set -euo pipefail
npm_dir=$1 spec=$2
name=${spec%@*} version=${spec##*@}
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  echo "SKIP: node and npm are needed to install $spec; the tests that use it will skip"
  exit 0
fi
if [ -f "$npm_dir/node_modules/$name/package.json" ] &&
   node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' \
     "$npm_dir/node_modules/$name/package.json" "$version"; then
  exit 0
fi
mkdir -p "$npm_dir"
[ -f "$npm_dir/package.json" ] || echo '{"private": true}' > "$npm_dir/package.json"
if ! (cd "$npm_dir" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error "$spec"); then
  echo "SKIP: npm install $spec failed (no registry?); the tests that use it will skip"
  rm -rf "$npm_dir/node_modules/$name"
fi
