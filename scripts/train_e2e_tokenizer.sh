#!/usr/bin/env bash
# Trains e2e-mdlm's byte-level BPE tokenizer (examples/train/e2e-mdlm/tokenizer.json) with Hugging Face's tokenizers
# library from npm, on exactly the texts `rudder train` trains the model on (its --texts-out).
# Usage: scripts/train_e2e_tokenizer.sh [BUILD_DIR] [VOCAB_SIZE]     (build, 4096)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} vocab=${2:-4096}
npm_dir=$build/npm-tokenizers
tests/serve/fetch_npm_package.sh "$npm_dir" tokenizers@0.23.2
[ -f "$npm_dir/node_modules/tokenizers/package.json" ] || { echo "npm's tokenizers is needed" >&2; exit 1; }
texts=$(mktemp --suffix=.jsonl)
trap 'rm -f "$texts"' EXIT
"$build/bin/rudder" train examples/train/e2e-mdlm.json --texts-out "$texts"
node scripts/train_bpe_tokenizer.mjs "$npm_dir" "$texts" examples/train/e2e-mdlm/tokenizer.json "$vocab"
