#!/usr/bin/env bash
# The measurements of the bundled denoisers in docs/results.md: teacher perplexity and memorisation of 500
# unconditional samples per model (200 steps), next to the dev references; then sampling throughput.
# Usage: scripts/measure-bundled.sh [BUILD_DIR] [OUT_DIR]   (about 40 minutes on 2 cores)
set -euo pipefail
build=${1:-build}
out=${2:-$build/measurements}
cd "$(dirname "$0")/.."
rudder="$build/bin/rudder"
mkdir -p "$out"
echo "== E2E dev references under the teacher"
"$rudder" score data/e2e_nlg/devset.csv.gz --against data/e2e_nlg/trainset.csv.gz
# unconditional_continuous_full_noise is the continuous model's own reverse process (noise_scale 1), for comparison;
# unconditional_cdcd is e2e-cdcd, the CDCD model, at noise scale 1; unconditional_discrete_wide is e2e-discrete-wide at
# temperature 1.
for recipe in unconditional_discrete unconditional_continuous unconditional_continuous_full_noise unconditional_cdcd \
    unconditional_discrete_wide; do
  echo "== $recipe: 500 unconditional samples, 200 steps"
  "$rudder" generate "examples/recipes/$recipe.json" --out "$out/$recipe.jsonl"
  "$rudder" score "$out/$recipe.jsonl" --against data/e2e_nlg/trainset.csv.gz
done
echo "== sampling throughput"
"$rudder" bench --batch-sizes 1,16,64 --steps 200
