#!/usr/bin/env bash
# The run-memory estimate against what runs really take (docs/results.md, "Run memory estimate"): for each shape,
# the estimate `rudder validate` prints and the peak resident memory of `rudder generate` (4 steps, one batch) as
# /usr/bin/time measures it, and their ratio. The estimate must stay within 25% of the peak.
# The rudder command allocates with tcmalloc (RUDDER_CLI_TCMALLOC), and the estimate follows the allocator it runs
# under: to measure glibc's, pass a build or installed prefix configured with -DRUDDER_CLI_TCMALLOC=OFF.
# Usage: bench/memory_estimate.sh [BUILD_DIR or PREFIX]   (make bench-memory; about 5 minutes)
set -euo pipefail
rudder=${1:-build}/bin/rudder
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (Debian package 'time')" >&2; exit 1; }

run() {  # label, recipe JSON
  echo "$2" > "$work/r.json"
  estimate=$("$rudder" validate "$work/r.json" | sed -n 's/.*about \([0-9.]*\) \([MG]B\) at its peak.*/\1 \2/p')
  peak_kb=$( { /usr/bin/time -f "%M" "$rudder" generate -q --threads 1 "$work/r.json" > /dev/null; } 2>&1 | tail -1)
  python3 - "$1" "$estimate" "$peak_kb" <<'PY'
import sys
label, (value, unit), peak_kb = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
estimate_mb = float(value) * (1000 if unit == "GB" else 1)
peak_mb = peak_kb * 1024 / 1e6
print(f"| {label} | {estimate_mb:.0f} | {peak_mb:.0f} | {estimate_mb / peak_mb:.2f} |")
PY
}

recipe() {  # model, batch, extra keys
  echo "{\"model\": \"$1\", \"sampler\": {\"steps\": 4}, \"samples\": $2, \"batch_size\": $2${3:-}}"
}

echo "| run | estimate MB | peak RSS MB | estimate / peak |"
echo "| --- | --- | --- | --- |"
for batch in 16 64 256 1024; do run "e2e-discrete, batch $batch" "$(recipe e2e-discrete $batch)"; done
run "e2e-discrete, temperature 1, batch 256" "$(recipe e2e-discrete 256 | sed 's/"steps": 4/"name": "analytic", "steps": 4/')"
run "e2e-discrete + length, span, batch 256" "$(recipe e2e-discrete 256 ', "controllers": [{"plugin": "length", "params": {"tokens": 10}}, {"plugin": "span", "params": {"prefix": "The"}}]')"
run "e2e-discrete + semantic, length, batch 256" "$(recipe e2e-discrete 256 ', "controllers": [{"plugin": "semantic", "params": {"fields": ["food[Italian]"]}}, {"plugin": "length", "params": {"tokens": 12}}]')"
for batch in 64 256 1024; do run "e2e-continuous, batch $batch" "$(recipe e2e-continuous $batch)"; done
run "e2e-continuous, interpolate, batch 256" "$(recipe e2e-continuous 256 | sed 's/"steps": 4/"name": "ddim", "x0": "interpolate", "steps": 4/')"
run "e2e-continuous + semantic, batch 256" "$(recipe e2e-continuous 256 ', "controllers": [{"plugin": "semantic", "params": {"fields": ["food[Italian]"]}}]')"
for batch in 64 256 1024; do run "e2e-corpus, batch $batch" "$(recipe e2e-corpus $batch)"; done
run "e2e-corpus, length 16, batch 256" "$(recipe e2e-corpus 256 ', "max_length": 16')"
