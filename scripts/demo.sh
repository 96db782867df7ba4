#!/usr/bin/env bash
# `make demo`: controlled generation with the bundled trained denoisers, in both diffusion families.
set -euo pipefail
build=${1:-build}
rudder="$build/bin/rudder"
cd "$(dirname "$0")/.."
for family in discrete continuous; do
  recipe=examples/recipes/length_span_$family.json
  echo
  echo "== $family diffusion (model e2e-$family): $recipe"
  echo "   (length: exactly 16 tokens; span: starts with \"The Eagle\")"
  "$rudder" generate --format text "$recipe"
done
echo
echo "Infilling (left and right context given, middle generated):"
"$rudder" generate --format text examples/recipes/infill_discrete.json
echo
echo "Sentiment (negative; the sentiment judge's verdict per sample), discrete diffusion:"
"$rudder" generate --format text examples/recipes/sentiment_discrete.json
