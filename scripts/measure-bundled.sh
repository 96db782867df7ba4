#!/usr/bin/env bash
# The measurements of the bundled denoisers in docs/results.md: teacher perplexity and memorisation of 500
# unconditional samples per model (200 steps), next to the dev references; then sampling throughput.
# Usage: scripts/measure-bundled.sh [BUILD_DIR] [OUT_DIR]   (about 15 minutes on 2 cores)
set -euo pipefail
build=${1:-build}
out=${2:-$build/measurements}
cd "$(dirname "$0")/.."
rudder="$build/bin/rudder"
mkdir -p "$out"
echo "== E2E dev references under the teacher"
"$rudder" score data/e2e_nlg/devset.csv.gz --against data/e2e_nlg/trainset.csv.gz
for family in discrete continuous; do
  echo "== e2e-$family: 500 unconditional samples, 200 steps"
  "$rudder" generate examples/recipes/unconditional_$family.json --out "$out/unconditional_$family.jsonl"
  "$rudder" score "$out/unconditional_$family.jsonl" --against data/e2e_nlg/trainset.csv.gz
done
echo "== sampling throughput"
"$rudder" bench --batch-sizes 1,16,64 --steps 200
