#!/usr/bin/env bash
# Fixture of serve.playground: installs playwright-core (the browser driver, without its browser downloads; the test
# drives Debian's chromium) from npm into the build tree. Exits 0 without it, saying why, when node or npm is
# missing or the install fails: the test then skips with the same reason.
# Usage: fetch_playwright.sh NPM_DIR
set -euo pipefail
npm_dir=$1
spec=playwright-core@1.65.1
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  echo "SKIP: node and npm are needed to install $spec; serve.playground will skip"
  exit 0
fi
if [ -f "$npm_dir/node_modules/playwright-core/package.json" ] &&
   node -e 'process.exit(require(process.argv[1]).version === "1.65.1" ? 0 : 1)' "$npm_dir/node_modules/playwright-core/package.json"; then
  exit 0
fi
mkdir -p "$npm_dir"
[ -f "$npm_dir/package.json" ] || echo '{"private": true}' > "$npm_dir/package.json"
if ! (cd "$npm_dir" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error "$spec"); then
  echo "SKIP: npm install $spec failed (no registry?); serve.playground will skip"
  rm -rf "$npm_dir/node_modules/playwright-core"
fi
