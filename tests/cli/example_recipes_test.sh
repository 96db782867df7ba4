#!/usr/bin/env bash
# Every shipped recipe validates against the bundled models and the first-party plugins: the examples the docs
# point to must run as written. Usage: example_recipes_test.sh RUDDER RECIPE_DIR
set -uo pipefail
rudder=$1 dir=$2
count=0
for recipe in "$dir"/*.json; do
  out=$("$rudder" validate "$recipe" 2>&1) || { echo "FAIL: $recipe: $out"; exit 1; }
  count=$((count + 1))
done
[ "$count" -gt 0 ] || { echo "FAIL: no recipes in $dir"; exit 1; }
echo "ok: $count recipes"
