#!/usr/bin/env bash
# Compute threads, measured as users meet them (docs/results.md, "Compute threads"): whole `rudder generate` runs
# of both bundled denoisers, unconditional and guided (sentiment), at batch 1, 16 and 64, with --threads 1, 2 and
# the default, on an idle machine and while another process keeps one core busy; a training step at 1 and 2
# threads likewise; and four generators at once in one process against the same four one after another.
# The three settings of a row run back to back, so machine noise hits them alike; the table gives seconds and
# each setting's ratio to one thread. Usage: bench/threads.sh [BUILD_DIR] [STEPS]   (make bench-threads)
set -euo pipefail
build=${1:-build}
steps=${2:-50}
rudder=$build/bin/rudder
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
loader_pid=
cleanup() { [ -n "$loader_pid" ] && kill "$loader_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

# recipe NAME MODEL GUIDED BATCH: a recipe file with the model's recommended sampler (or the sentiment example's).
recipe() {
  python3 - "$root" "$work/$1.json" "$2" "$3" "$4" "$steps" <<'PY'
import json, sys
root, out, model, guided, batch, steps = sys.argv[1:7]
family = "discrete" if "discrete" in model else "continuous"
if guided == "yes":
    r = json.load(open(f"{root}/examples/recipes/sentiment_{family}.json"))
else:
    r = {"model": model}
r["sampler"] = dict(r.get("sampler", {}), steps=int(steps))
r.update(seed=1, batch_size=int(batch), samples=max(int(batch), 4))
json.dump(r, open(out, "w"))
PY
}

seconds() {  # command...: wall seconds
  local start end
  start=$(date +%s.%N)
  "$@" > /dev/null 2>&1 || { echo "FAILED: $*" >&2; exit 1; }
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

row() {  # label, then the command; prints "| label | t1 | t2 (r) | default (r) |"
  local label=$1; shift
  local one two def
  one=$(seconds "$@" --threads 1)
  two=$(seconds "$@" --threads 2)
  def=$(seconds "$@")
  printf '| %s | %.1f | %.1f (%.2fx) | %.1f (%.2fx) |\n' "$label" "$one" "$two" "$(echo "$one / $two" | bc -l)" \
    "$def" "$(echo "$one / $def" | bc -l)"
}

sampling_table() {
  echo "| run ($steps steps) | --threads 1 (s) | --threads 2 (s, speed-up) | default (s, speed-up) |"
  echo "| --- | --- | --- | --- |"
  for model in e2e-discrete e2e-continuous; do
    for guided in no yes; do
      for batch in 1 16 64; do
        name="${model}_${guided}_$batch"
        recipe "$name" "$model" "$guided" "$batch"
        label="$model $([ $guided = yes ] && echo "sentiment-guided" || echo unconditional), batch $batch"
        row "$label" "$rudder" generate -q -o /dev/null "$work/$name.json"
      done
    done
  done
}

training_rate() {  # threads: steps/s of a short discrete denoiser training run
  python3 - "$root" "$work/train_$1.json" "$1" "$work/out_$1" <<'PY'
import json, sys
root, out, threads, folder = sys.argv[1:5]
c = json.load(open(f"{root}/examples/train/discrete.json"))
c["data"] = {"train": f"{root}/data/e2e_nlg/trainset.csv.gz"}
c["training"].update(steps=40, warmup=10, threads=int(threads), checkpoint_every=0, log_every=40)
c["out"] = folder
json.dump(c, open(out, "w"))
PY
  rm -rf "$work/out_$1"
  "$rudder" train "$work/train_$1.json" 2>&1 | sed -n 's/.* (\([0-9.]*\) steps\/s)$/\1/p' | tail -1
}

training_table() {
  local one two
  one=$(training_rate 1)
  two=$(training_rate 2)
  echo "| training.threads | 1 | 2 |"
  echo "| --- | --- | --- |"
  printf '| e2e-discrete denoiser, batch 64: steps/s | %s | %s (%.2fx) |\n' "$one" "$two" "$(echo "$two / $one" | bc -l)"
}

concurrency() {  # four generators at once in one process against the same four one after another (Python, C API)
  PYTHONPATH=$root/python RUDDER_LIBRARY=$build/lib/librudder.so python3 - "$work" <<'PY'
import sys, threading, time, rudder
work = sys.argv[1]
recipes = [f"{work}/{m}_no_16.json" for m in ("e2e-discrete", "e2e-continuous")] * 2
gens = [rudder.Generator(r) for r in recipes]
for g in gens:
    g.generate(samples=1, seed=9)  # one-time setup, untimed
start = time.time()
for g in gens:
    g.generate()
sequential = time.time() - start
threads = [threading.Thread(target=g.generate) for g in gens]
start = time.time()
for t in threads:
    t.start()
for t in threads:
    t.join()
concurrent = time.time() - start
print(f"| 4 generators (2 x each denoiser, batch 16) | {sequential:.1f} | {concurrent:.1f} ({concurrent / sequential:.2f} of sequential) |")
PY
}

cores=$(nproc)
echo "## Idle machine ($cores cores)"
echo
sampling_table
echo
training_table
echo
echo "| generators in one process | one after another (s) | all at once (s) |"
echo "| --- | --- | --- |"
concurrency
echo
sh -c 'while :; do :; done' &
loader_pid=$!
echo "## Another process keeps one core busy"
echo
sampling_table
echo
training_table
