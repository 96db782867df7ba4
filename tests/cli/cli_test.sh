#!/usr/bin/env bash
# CLI behaviour as a user sees it: exit codes, output shape, messages. Usage: cli_test.sh RUDDER FIXTURE_DIR CASE
set -uo pipefail
rudder=$1 fixtures=$2 case=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A small corpus model and recipes over it, in a scratch folder (relative model paths resolve against the recipe).
printf '%s\n' "The Eagle is a pub ." "The Mill serves Italian food ." "Aromi is a coffee shop ." \
  "Zizzi is a cheap restaurant in the city centre ." > "$work/sentences.txt"
"$rudder" corpus-model "$work/sentences.txt" "$work/model" > /dev/null || fail "corpus-model failed"
cat > "$work/good.json" <<'JSON'
{ "model": "model", "family": "discrete", "sampler": {"steps": 50}, "samples": 3, "max_length": 12, "seed": 5,
  "controllers": [ {"plugin": "length", "params": {"tokens": 6}}, {"plugin": "span", "params": {"prefix": "The"}} ] }
JSON

case $case in
  plugins)
    out=$("$rudder" plugins) || fail "exit $?"
    grep -q "^  length 1.0.0" <<<"$out" || fail "length not listed: $out"
    grep -q "^  span 1.0.0" <<<"$out" || fail "span not listed: $out"
    # The ABI 1.2 forms by name: length asks for its pad ban as bits at the step's rows, and reads no x0.
    grep -q "^  length 1.0.0  abi 1.3  \[hard_constraint,evaluate,thread_safe,rows,packed_mask,ignores_x0\]" <<<"$out" \
      || fail "length's capabilities not named: $out"
    ;;
  models)
    out=$("$rudder" models) || fail "exit $?"
    grep -q "^  e2e-continuous$" <<<"$out" || fail "bundled models not listed: $out"
    grep -q "^  e2e-discrete  (default)$" <<<"$out" || fail "the default model not marked: $out"
    # Generators first; the classifiers and judges under their own heading, with what they are.
    generators=$(sed -n '/^generators/,/^classifiers/p' <<<"$out")
    grep -q "e2e-sentiment-judge\|ewt-tagger\|e2e-teacher" <<<"$generators" && fail "a classifier listed as a generator: $out"
    grep -q "^  e2e-sentiment-judge  attribute classifier" <<<"$out" || fail "the judge not described: $out"
    "$rudder" models --json | python3 -c 'import json, sys; d = json.load(sys.stdin)
assert "e2e-discrete" in d["generators"] and d["default"] == "e2e-discrete", d
assert {o["name"] for o in d["others"]} >= {"ewt-tagger", "gum-parser", "e2e-teacher", "e2e-sentiment-judge"}, d' \
      || fail "rudder models --json"
    # A classifier named as a recipe's model: what it is, and where the generators are listed.
    printf '{"model": "e2e-sentiment-judge"}' > "$work/judge.json"
    err=$("$rudder" validate "$work/judge.json" 2>&1) && fail "a classifier accepted as a recipe's model"
    grep -q "is an attribute classifier (the sentiment controller's guide or judge), not a diffusion model" <<<"$err" \
      || fail "the classifier not named as one: $err"
    # One model described: what it is, how it was trained, its sampler and weights, read from its folder.
    out=$("$rudder" models e2e-continuous) || fail "exit $?"
    grep -q "^  kind: continuous denoiser trained as Diffusion-LM" <<<"$out" || fail "kind missing: $out"
    grep -q '^  recommended_sampler: {"name":"ddpm"' <<<"$out" || fail "sampler missing: $out"
    grep -q "^  weights: [0-9]* parameters, [0-9]* bytes in \[\"model.safetensors\"\] (\[\"float16\"\])" <<<"$out" \
      || fail "weights missing: $out"
    out=$("$rudder" models "$work/model" --json) || fail "exit $?"
    python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["kind"].startswith("exact corpus denoiser"), d' <<<"$out" \
      || fail "corpus model not described as JSON: $out"
    out=$("$rudder" models e2e-continous 2>&1) && fail "an unknown model was described"
    grep -q "did you mean 'e2e-continuous'" <<<"$out" || fail "no suggestion: $out"
    ;;
  plugins_rejected)
    out=$(RUDDER_PLUGIN_PATH="$fixtures" "$rudder" plugins --json) || fail "exit $?"
    grep -q '"id": "good"' <<<"$out" || fail "fixture plugin not found through RUDDER_PLUGIN_PATH: $out"
    grep -q 'not_a_library.so' <<<"$out" || fail "non-library not reported as rejected: $out"
    grep -q '"id": "length"' <<<"$out" || fail "first-party plugins must still be found: $out"
    ;;
  plugins_broken)
    # Libraries that hang, abort, exit or claim 10^8 controllers (tests/fixtures/broken_plugins) on the path: each
    # is scanned in a child process and listed as rejected with its reason; a recipe that needs only length runs.
    broken=$(dirname "$fixtures")/broken_plugins
    export RUDDER_PLUGIN_PATH="$broken" RUDDER_PLUGIN_SCAN_TIMEOUT=3 RUDDER_CACHE_DIR="$work/cache"
    out=$("$rudder" plugins) || fail "plugins: exit $?: $out"
    grep -q "^  length 1.0.0" <<<"$out" || fail "length not listed: $out"
    grep -q "rudder_hangs.so: did not finish loading within 3 s" <<<"$out" || fail "the hanging library: $out"
    grep -q "rudder_aborts.so: crashed while loading, killed by signal 6" <<<"$out" || fail "the aborting library: $out"
    grep -q "rudder_exits.so: ended the process with exit status 0" <<<"$out" || fail "the exiting library: $out"
    grep -q "rudder_huge_count.so: claims 100000000 controllers" <<<"$out" || fail "the huge library: $out"
    [ -f "$work/cache/plugin-index.json" ] || fail "no plugin index was written"
    json=$("$rudder" plugins --json) || fail "plugins --json: exit $?"
    python3 -c 'import json,sys; j=json.load(sys.stdin); r={x["file"].split("/")[-1] for x in j["rejected"]}
assert {"rudder_hangs.so","rudder_aborts.so","rudder_exits.so","rudder_huge_count.so"} <= r, r' <<<"$json" \
      || fail "plugins --json: $json"
    printf '{"model": "model", "max_length": 12, "samples": 1, "sampler": {"steps": 5}, "controllers": [{"plugin": "length", "params": {"tokens": 6}}]}\n' \
      > "$work/length_only.json"
    "$rudder" generate -q "$work/length_only.json" -o "$work/length_only.jsonl" 2> "$work/err.txt" \
      || fail "a recipe using only length: exit $?: $(cat "$work/err.txt")"
    [ -s "$work/length_only.jsonl" ] || fail "no sample written"
    # A broken library the recipe names is refused with its reason, not run.
    printf '{"model": "model", "max_length": 12, "controllers": [{"plugin": "%s/rudder_aborts.so"}]}\n' "$broken" > "$work/aborts.json"
    err=$("$rudder" validate "$work/aborts.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 2 ] || fail "expected exit 2 for a recipe naming a crashing library, got $code: $err"
    grep -q "rudder_aborts.so: crashed while loading" <<<"$err" || fail "$err"
    ;;
  plugin_pin)
    length=$("$rudder" plugins --json | python3 -c 'import json,sys; print([c for c in json.load(sys.stdin)["controllers"] if c["id"]=="length"][0]["file"])')
    digest=$(sha256sum "$length" | cut -d' ' -f1)
    "$rudder" plugins | grep -q "sha256 $digest" || fail "plugins does not show the digest $digest"
    printf '{"model": "model", "max_length": 12, "controllers": [{"plugin": "length", "sha256": "%s", "params": {"tokens": 6}}]}\n' \
      "$digest" > "$work/pinned.json"
    "$rudder" validate "$work/pinned.json" > /dev/null || fail "the right pin was refused"
    printf '{"model": "model", "max_length": 12, "controllers": [{"plugin": "length", "sha256": "%s", "params": {"tokens": 6}}]}\n' \
      "$(printf '%064d' 0)" > "$work/mispinned.json"
    err=$("$rudder" validate "$work/mispinned.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 2 ] || fail "expected exit 2 for a wrong pin, got $code: $err"
    grep -q "/controllers/0/plugin: .*its SHA-256 is $digest, but the recipe pins 0000" <<<"$err" || fail "$err"
    # A library named by path outside the search path is refused, even with the right pin.
    cp "$length" "$work/rudder_length_copy.so"
    printf '{"model": "model", "max_length": 12, "controllers": [{"plugin": "./rudder_length_copy.so", "sha256": "%s", "params": {"tokens": 6}}]}\n' \
      "$digest" > "$work/outside.json"
    err=$("$rudder" validate "$work/outside.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 2 ] || fail "expected exit 2 for a plugin outside the search path, got $code: $err"
    grep -q "not in a folder of the plugin search path" <<<"$err" || fail "$err"
    RUDDER_PLUGIN_PATH="$work" "$rudder" validate "$work/outside.json" > /dev/null || fail "added to the search path, it must load"
    ;;
  validate_ok)
    out=$("$rudder" validate "$work/good.json") || fail "valid recipe rejected (exit $?): $out"
    grep -q "valid (model model, discrete, sampler analytic, 2 controllers, about " <<<"$out" || fail "summary: $out"
    ;;
  validate_bad)
    cat > "$work/bad.json" <<'JSON'
{ "model": "model", "sampler": {"stpes": 50}, "controllers": [ {"plugin": "lenght"}, {"plugin": "span", "params": {"suffix": "x"}} ] }
JSON
    err=$("$rudder" validate "$work/bad.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 2 ] || fail "expected exit 2, got $code"
    grep -q "/sampler/stpes: unknown key 'stpes'; did you mean 'steps'?" <<<"$err" || fail "$err"
    grep -q "/controllers/0/plugin: .*did you mean 'length'?" <<<"$err" || fail "$err"
    grep -q '/controllers/1/params: .*/suffix: needs "length"' <<<"$err" || fail "$err"
    ;;
  validate_checks_params_against_the_run)
    # What validate accepts, generate can run: params that cannot fit max_length are found by validate.
    sed 's/"tokens": 6/"tokens": 100000/' "$work/good.json" > "$work/long.json"
    err=$("$rudder" validate "$work/long.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 2 ] || fail "expected exit 2, got $code: $err"
    grep -q "/controllers/0/params: does not fit this run (discrete model 'model', max_length 12): .*100000" <<<"$err" || fail "$err"
    ;;
  validate_memory_estimate)
    # validate reports the run's estimated peak memory; a run estimated over the limit is refused before it runs.
    out=$("$rudder" validate "$work/good.json") || fail "exit $?"
    grep -Eq "about [0-9.]+ [MG]B at its peak\)$" <<<"$out" || fail "no estimate: $out"
    err=$("$rudder" validate --max-memory 1 "$work/good.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 2 ] || fail "expected exit 2 over --max-memory, got $code"
    grep -q "/batch_size: a batch of 3 needs about .* over the limit of 1 MB; lower batch_size or max_length" <<<"$err" || fail "$err"
    # The bundled corpus model at 4096 x 4096 would need about a terabyte: refused at once, not after allocating.
    printf '{"model": "e2e-corpus", "batch_size": 4096, "samples": 4096, "max_length": 4096}' > "$work/huge.json"
    err=$("$rudder" generate -q "$work/huge.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 2 ] || fail "expected exit 2 for a run over the machine's memory, got $code: $err"
    grep -q "over the limit of .* (the machine's memory)" <<<"$err" || fail "$err"
    ;;
  validate_not_json)
    printf '{"model": "model",\n  "samples": }\n' > "$work/broken.json"
    err=$("$rudder" validate "$work/broken.json" 2>&1); code=$?
    [ $code -eq 2 ] || fail "expected exit 2, got $code"
    grep -q "not valid JSON at line 2" <<<"$err" || fail "$err"
    ;;
  generate)
    "$rudder" generate "$work/good.json" --out "$work/out.jsonl" 2> "$work/err.txt" || fail "exit $?: $(cat "$work/err.txt")"
    [ "$(wc -l < "$work/out.jsonl")" -eq 3 ] || fail "expected 3 lines: $(cat "$work/out.jsonl")"
    while read -r line; do
      grep -q '"text":"The ' <<<"$line" || fail "text: $line"
      grep -q '"tokens":\[[0-9,]*\]' <<<"$line" || fail "tokens: $line"
      grep -q '"controls":{"length":{"satisfied":true,"score":6.0},"span":{"satisfied":true,"score":1.0}}' <<<"$line" || fail "controls: $line"
    done < "$work/out.jsonl"
    grep -q "length: 3/3 satisfied" "$work/err.txt" || fail "summary on stderr: $(cat "$work/err.txt")"
    grep -q "step 50/50" "$work/err.txt" || fail "progress on stderr: $(cat "$work/err.txt")"
    ;;
  generate_threads)
    # --threads caps the compute threads; the samples are the same whatever the count.
    "$rudder" generate -q --threads 1 "$work/good.json" -o "$work/one.jsonl" || fail "--threads 1: exit $?"
    "$rudder" generate -q --threads 2 "$work/good.json" -o "$work/two.jsonl" || fail "--threads 2: exit $?"
    cmp -s "$work/one.jsonl" "$work/two.jsonl" || fail "samples differ with the thread count"
    err=$("$rudder" generate --threads 0 "$work/good.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 2 ] || fail "--threads 0: exit $code, expected 2: $err"
    grep -q -- "--threads" <<<"$err" || fail "--threads 0 not named: $err"
    ;;
  generate_stdout_is_only_jsonl)
    out=$("$rudder" generate "$work/good.json" -n 2 2>/dev/null) || fail "exit $?"
    [ "$(grep -c '^{' <<<"$out")" -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 2 ] || fail "stdout: $out"
    ;;
  generate_conflict)
    sed 's/"prefix": "The"/"prefix": "The", "length": 7/' "$work/good.json" > "$work/conflict.json"
    # Found before sampling, by validate as by generate: both controllers' pointers, the token in words.
    err=$("$rudder" generate -q "$work/conflict.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 2 ] || fail "expected exit 2 (an invalid recipe), got $code: $err"
    grep -q "controller 'length' fixes the end of the text at position 6, which 'span' forbids" <<<"$err" || fail "$err"
    err=$("$rudder" validate "$work/conflict.json" 2>&1); code=$?
    [ $code -eq 2 ] || fail "validate: expected exit 2, got $code: $err"
    grep -q "/controllers/0: controller 'length' fixes the end of the text" <<<"$err" || fail "validate: $err"
    ;;
  generate_failure_keeps_old_output)
    # A run that fails after one of three batches: the old output is untouched, the finished sample is kept apart.
    echo "old results" > "$work/out.jsonl"
    sed 's/"controllers": \[/"batch_size": 1, "controllers": [ {"plugin": "throws", "params": {"throw_in": "evaluate", "after": 1}},/' \
      "$work/good.json" > "$work/fails.json"
    err=$(RUDDER_PLUGIN_PATH="$fixtures" "$rudder" generate -q "$work/fails.json" -o "$work/out.jsonl" 2>&1); code=$?
    [ $code -eq 1 ] || fail "expected exit 1, got $code: $err"
    [ "$(cat "$work/out.jsonl")" = "old results" ] || fail "the old output was changed: $(cat "$work/out.jsonl")"
    [ "$(wc -l < "$work/out.jsonl.partial")" -eq 1 ] || fail "the finished sample was not kept: $(ls "$work")"
    grep -q "the 1 samples completed are in '$work/out.jsonl.partial'" <<<"$err" || fail "$err"
    # Nothing completed: no .partial is left behind.
    sed 's/"after": 1/"after": 0/' "$work/fails.json" > "$work/fails_at_once.json"
    rm "$work/out.jsonl.partial"
    RUDDER_PLUGIN_PATH="$fixtures" "$rudder" generate -q "$work/fails_at_once.json" -o "$work/out.jsonl" 2>/dev/null
    [ ! -e "$work/out.jsonl.partial" ] || fail "an empty .partial was left"
    # Success replaces the old output whole.
    "$rudder" generate -q "$work/good.json" -o "$work/out.jsonl" || fail "exit $?"
    [ "$(wc -l < "$work/out.jsonl")" -eq 3 ] && [ ! -e "$work/out.jsonl.partial" ] || fail "not replaced: $(ls "$work")"
    ;;
  generate_interrupted)
    # Ctrl-C stops the run within a step: exit 130, finished samples kept in the .partial file, old output intact.
    echo "old results" > "$work/out.jsonl"
    sed 's/"samples": 3/"samples": 200, "batch_size": 1/; s/"controllers": \[/"controllers": [ {"plugin": "slow", "params": {"ms": 2}},/' \
      "$work/good.json" > "$work/long.json"
    RUDDER_PLUGIN_PATH="$fixtures" "$rudder" generate -q "$work/long.json" -o "$work/out.jsonl" 2> "$work/err.txt" &
    pid=$!
    for _ in $(seq 600); do [ -s "$work/out.jsonl.partial" ] && break; sleep 0.05; done
    kill -INT $pid
    wait $pid; code=$?
    [ $code -eq 130 ] || fail "expected exit 130, got $code: $(cat "$work/err.txt")"
    [ "$(cat "$work/out.jsonl")" = "old results" ] || fail "the old output was changed"
    lines=$(wc -l < "$work/out.jsonl.partial")
    [ "$lines" -ge 1 ] && [ "$lines" -lt 200 ] || fail "$lines samples kept"
    grep -q "interrupted after $lines of 200 samples" "$work/err.txt" || fail "$(cat "$work/err.txt")"
    ;;
  generate_isolated_crash)
    # A controller in a process of its own that crashes fails the run (exit 1) naming it; the host itself is fine.
    sed 's/"controllers": \[/"isolation": "process", "controllers": [ {"plugin": "faulty", "params": {"fault": "abort", "at_step": 3}},/' \
      "$work/good.json" > "$work/crash.json"
    err=$(RUDDER_PLUGIN_PATH="$fixtures" "$rudder" generate -q "$work/crash.json" -o "$work/out.jsonl" 2>&1); code=$?
    [ $code -eq 1 ] || fail "expected exit 1, got $code: $err"
    grep -q "controller 'faulty' (faulty, rudder_faulty.so): step did not complete at step [0-9]*: its process (pid [0-9]*) was killed by signal 6" <<<"$err" \
      || fail "$err"
    [ ! -e "$work/out.jsonl" ] || fail "a failed run wrote its output"
    # With on_failure continue the run goes on without it, with a warning.
    sed 's/"at_step": 3}/"at_step": 3}, "on_failure": "continue"/' "$work/crash.json" > "$work/crash_continue.json"
    err=$(RUDDER_PLUGIN_PATH="$fixtures" "$rudder" generate -q "$work/crash_continue.json" -o "$work/out.jsonl" 2>&1) \
      || fail "on_failure continue: exit $?: $err"
    grep -q "the run goes on without it" <<<"$err" || fail "no warning: $err"
    [ "$(wc -l < "$work/out.jsonl")" -eq 3 ] || fail "expected 3 samples: $(cat "$work/out.jsonl")"
    # RUDDER_ISOLATION must be a known value.
    err=$(RUDDER_ISOLATION=sandbox "$rudder" validate "$work/good.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 2 ] || fail "RUDDER_ISOLATION=sandbox: exit $code, expected 2: $err"
    grep -q "RUDDER_ISOLATION=sandbox" <<<"$err" || fail "$err"
    ;;
  isolation_example_recipes)
    # Every first-party controller gives the same samples in a process of its own as in-process: example recipes
    # covering cfg, semantic, pos, sentiment, syntax_span, syntax_tree, length, span and infill, both families, and a
    # word-level classifier reading a BPE model's text ("input": "text", which needs the run's token pieces), at 2
    # samples and few steps (the samples and the controls must be byte-identical).
    examples=$here/../../examples/recipes
    for name in cfg_discrete semantic_continuous syntax_pos_discrete sentiment_continuous syntax_span_discrete \
                syntax_tree_continuous compose_length_sentiment_span_discrete compose_semantic_tree_discrete \
                compose_hard_constraints infill_continuous length_span_continuous syntax_pos_mdlm; do
      python3 - "$examples/$name.json" "$work/$name.json" <<'PY' || fail "$name: cannot shorten the recipe"
import json, sys
r = json.load(open(sys.argv[1]))
r["sampler"]["steps"] = min(r["sampler"].get("steps", 100), 12)
r["samples"] = 2
# Exact candidate scoring costs a classifier pass per candidate: a few candidates exercise the same path.
for c in r.get("controllers", []):
    if c.get("params", {}).get("scoring") == "exact":
        c["params"]["top_k"] = min(c["params"]["top_k"], 8)
json.dump(r, open(sys.argv[2], "w"))
PY
      "$rudder" generate -q "$work/$name.json" -o "$work/$name.in.jsonl" 2> "$work/err.txt" \
        || fail "$name in-process: exit $?: $(cat "$work/err.txt")"
      RUDDER_ISOLATION=process "$rudder" generate -q "$work/$name.json" -o "$work/$name.process.jsonl" 2> "$work/err.txt" \
        || fail "$name isolated: exit $?: $(cat "$work/err.txt")"
      [ "$(wc -l < "$work/$name.in.jsonl")" -eq 2 ] || fail "$name: $(cat "$work/$name.in.jsonl")"
      cmp -s "$work/$name.in.jsonl" "$work/$name.process.jsonl" \
        || fail "$name: isolated samples differ: $(diff "$work/$name.in.jsonl" "$work/$name.process.jsonl")"
    done
    ;;
  generate_write_errors)
    err=$("$rudder" generate -q "$work/good.json" 2>&1 > /dev/full); code=$?
    [ $code -eq 1 ] || fail "stdout on a full disk: exit $code, expected 1"
    grep -q "cannot write to standard output" <<<"$err" || fail "$err"
    err=$("$rudder" validate "$work/good.json" 2>&1 > /dev/full); code=$?
    [ $code -eq 1 ] || fail "validate to a full disk: exit $code, expected 1: $err"
    err=$("$rudder" generate -q "$work/good.json" -o "$work/no/such/folder/out.jsonl" 2>&1); code=$?
    [ $code -eq 1 ] || fail "an output in a missing folder: exit $code, expected 1"
    grep -q "cannot write '$work/no/such/folder/out.jsonl.partial'" <<<"$err" || fail "$err"
    err=$("$rudder" generate -q "$work/good.json" -o "$work/good.json" 2>&1); code=$?
    [ $code -eq 2 ] || fail "-o naming the recipe: exit $code, expected 2"
    grep -q "is the recipe itself" <<<"$err" || fail "$err"
    grep -q '"controllers"' "$work/good.json" || fail "the recipe was overwritten"
    # /dev/null and other non-regular files are written directly, never replaced.
    "$rudder" generate -q "$work/good.json" -o /dev/null || fail "-o /dev/null: exit $?"
    [ -c /dev/null ] || fail "/dev/null was replaced"
    ;;
  stdin_and_version)
    (cd "$work" && "$rudder" validate - < good.json) | grep -q "^-: valid" || fail "validate - did not read stdin"
    [ "$(cd "$work" && "$rudder" generate -q - < good.json | wc -l)" -eq 3 ] || fail "generate - did not read stdin"
    "$rudder" --version | grep -Eq "^rudder [0-9]+\.[0-9]+\.[0-9]+ \(plugin ABI [0-9]+\.[0-9]+\)$" ||
      fail "--version: $("$rudder" --version)"
    ;;
  eval_shard_merge)
    # An eval spread over shards (--shard K/N) and merged (--merge) writes what one run writes: the same samples byte
    # for byte, the same results but for the timing. A merge that lacks a shard, or a shard given twice, says so.
    suite=$here/../../examples/eval/hard_constraints.json
    "$rudder" eval "$suite" --only discrete --targets 3 --threads 1 -q -o "$work/one" > /dev/null || fail "eval: exit $?"
    for k in 0 1; do
      "$rudder" eval "$suite" --only discrete --targets 3 --threads 1 -q --shard $k/2 -o "$work/s$k" > "$work/shard.out" \
        || fail "shard $k: exit $?"
      [ -s "$work/shard.out" ] && fail "a shard printed results: $(cat "$work/shard.out")"
    done
    "$rudder" eval "$suite" --only discrete -q --merge "$work/s0" "$work/s1" -o "$work/merged" > /dev/null || fail "merge: exit $?"
    diff -r "$work/one/samples" "$work/merged/samples" > /dev/null || fail "merged samples differ from one run's"
    python3 - "$work/one/results.json" "$work/merged/results.json" <<'PY' || fail "merged results differ from one run's"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
for r in a["tasks"] + b["tasks"]:
    r.pop("seconds_per_sample")
sys.exit(0 if a == b and len(a["tasks"]) == 4 and a["tasks"][0]["targets"] == 3 else 1)
PY
    out=$("$rudder" eval "$suite" --only discrete -q --merge "$work/s0" -o "$work/m2" 2>&1) && fail "a merge without shard 1 succeeded"
    grep -q "shard 1/2 is missing" <<<"$out" || fail "missing shard not named: $out"
    out=$("$rudder" eval "$suite" --only discrete -q --merge "$work/s0" "$work/s0" -o "$work/m3" 2>&1) && fail "a shard given twice merged"
    grep -q "appears twice" <<<"$out" || fail "duplicate target not named: $out"
    out=$("$rudder" eval "$suite" --shard 2/2 -o "$work/s2" 2>&1) && fail "--shard 2/2 accepted"
    grep -q "expected K/N with 0 <= K < N" <<<"$out" || fail "bad --shard not explained: $out"
    ;;
  eval_bpe_targets)
    # Targets of fixed tokens on a BPE model (e2e-mdlm): the prefix and suffix of an infill are its decoding of the
    # reference's tokens, which encode back to them, so every infill holds; a length target counts its tokens.
    suite=$here/../../examples/eval/controls_mdlm.json
    "$rudder" eval "$suite" --only "infill" --targets 3 --threads 1 -q -o "$work/infill" > /dev/null || fail "eval: exit $?"
    "$rudder" eval "$suite" --only "length, guided" --targets 3 --threads 1 -q -o "$work/length" > /dev/null \
      || fail "eval: exit $?"
    python3 - "$work/infill" "$work/length" <<'PY' || fail "BPE targets: $(cat "$work/infill/results.md" "$work/length/results.md")"
import json, sys
infill = json.load(open(sys.argv[1] + "/results.json"))["tasks"][0]
assert infill["targets"] == 3 and infill["controls"]["span"]["success"] == 1.0, infill
for line in open(sys.argv[1] + "/samples/infill.jsonl"):
    s = json.loads(line)
    p = s["target"]["params"]["span"]
    assert s["text"].startswith(p["prefix"]) and s["text"].endswith(p["suffix"]), (s["text"], p)
    assert len(s["tokens"]) == p["length"], (s["tokens"], p)
length = json.load(open(sys.argv[2] + "/results.json"))["tasks"][0]
assert length["targets"] == 3 and length["controls"]["length"]["success"] == 1.0, length
PY
    ;;
  exclude_words)
    # Both bundled models with the shipped recipes: no sample contains a banned word, and every verdict says so.
    for family in discrete continuous; do
      "$rudder" generate -q -n 8 "$here/../../examples/recipes/exclude_words_$family.json" -o "$work/$family.jsonl" \
        || fail "$family: exit $?"
      [ "$(grep -c '"exclude_words":{"satisfied":true,"score":0.0}' "$work/$family.jsonl")" -eq 8 ] \
        || fail "$family verdicts: $(cat "$work/$family.jsonl")"
      ! grep -qiE '"text":"[^"]*\b(restaurant|pub|coffee)\b' "$work/$family.jsonl" || fail "$family: a banned word: $(cat "$work/$family.jsonl")"
    done
    # Without the control the same recipe writes those words (so the test above can fail).
    sed 's/{ "plugin": "exclude_words", "params": { "words": \["restaurant", "pub", "coffee"\] } }//' \
      "$here/../../examples/recipes/exclude_words_discrete.json" > "$work/free.json"
    "$rudder" generate -q -n 8 "$work/free.json" -o "$work/free.jsonl" || fail "unconstrained: exit $?"
    grep -qiE '"text":"[^"]*\b(restaurant|pub|coffee)\b' "$work/free.jsonl" || fail "unconstrained samples lack the words"
    # Bad params name their place.
    printf '%s' '{"model": "e2e-discrete", "controllers": [{"plugin": "exclude_words", "params": {"words": ["two words", 3]}}]}' > "$work/bad.json"
    err=$("$rudder" validate "$work/bad.json" 2>&1); code=$?
    [ $code -ne 0 ] || fail "bad words accepted"
    grep -q "/words/0" <<<"$err" && grep -q "/words/1" <<<"$err" || fail "bad words not named: $err"
    ;;
  no_repeats)
    # The demo's continuous recipe, which carries the control: no doubled punctuation mark and no immediately repeated
    # word in 24 samples, and every verdict says so; without the control the same samples have some (so this test can
    # fail), and bad params name their place.
    recipe="$here/../../examples/recipes/length_span_continuous.json"
    grep -q '"no_repeats"' "$recipe" || fail "the demo recipe lost its no_repeats"
    "$rudder" generate -q -n 24 --seed 3 "$recipe" -o "$work/clean.jsonl" || fail "exit $?"
    [ "$(grep -c '"no_repeats":{"satisfied":true,"score":0.0}' "$work/clean.jsonl")" -eq 24 ] \
      || fail "verdicts: $(cat "$work/clean.jsonl")"
    python3 - "$work/clean.jsonl" <<'PY' || fail "a doubled mark or a repeated word: $(cat "$work/clean.jsonl")"
import json, re, sys
texts = [json.loads(line)["text"] for line in open(sys.argv[1])]
bad = [t for t in texts if re.search(r"[.,!?;:]\s*[.,!?;:]", t) or re.search(r"\b(\w+)\s+\1\b", t, re.I)]
sys.exit(1 if bad else 0)
PY
    python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))
r["controllers"] = [c for c in r["controllers"] if c["plugin"] != "no_repeats"]; print(json.dumps(r))' "$recipe" \
      > "$work/free.json" || fail "the control was not taken out"
    "$rudder" generate -q -n 24 --seed 3 "$work/free.json" -o "$work/free.jsonl" || fail "without: exit $?"
    grep -qE '"text":"[^"]*[.,!?;:] ?[.,!?;:]' "$work/free.jsonl" || fail "without the control no sample has a doubled mark"
    printf '%s' '{"model": "e2e-discrete", "controllers": [{"plugin": "no_repeats", "params": {"words": "yes"}}]}' > "$work/bad.json"
    err=$("$rudder" validate "$work/bad.json" 2>&1) && fail "bad params accepted"
    grep -q "/words" <<<"$err" || fail "bad params not named: $err"
    ;;
  well_formed)
    # The demo's discrete recipe, which steers with it: 24 samples that each end on a sentence-final mark, with no
    # lowercase word after a sentence's end and no dangling word before one, and every verdict says so; without the
    # control some samples end mid-phrase (so this test can fail); bad params name their place.
    recipe="$here/../../examples/recipes/length_span_discrete.json"
    grep -q '"well_formed"' "$recipe" || fail "the demo recipe lost its well_formed"
    "$rudder" generate -q -n 24 --seed 3 "$recipe" -o "$work/formed.jsonl" || fail "exit $?"
    [ "$(grep -c '"well_formed":{"satisfied":true,"score":0.0}' "$work/formed.jsonl")" -eq 24 ] \
      || fail "verdicts: $(cat "$work/formed.jsonl")"
    python3 - "$work/formed.jsonl" <<'PY' || fail "a text that is not finished sentences: $(cat "$work/formed.jsonl")"
import json, re, sys
texts = [json.loads(line)["text"] for line in open(sys.argv[1])]
bad = [t for t in texts if not re.search(r"[.!?]$", t) or re.search(r"[.!?]\s+[a-z]", t)
       or re.search(r"\b(the|a|and|of|near|with|it|not)\s*[.!?]", t, re.I)]
sys.exit(1 if bad else 0)
PY
    python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))
for c in r["controllers"]:
    if c["plugin"] == "well_formed": c["evaluate_only"] = True
print(json.dumps(r))' "$recipe" > "$work/judged.json" || fail "the control was not made a judge"
    "$rudder" generate -q -n 24 --seed 3 "$work/judged.json" -o "$work/judged.jsonl" || fail "judged: exit $?"
    grep -q '"well_formed":{"satisfied":false' "$work/judged.jsonl" || fail "unsteered, every sample was well formed"
    printf '%s' '{"model": "e2e-discrete", "controllers": [{"plugin": "well_formed", "params": {"dangling": [1]}}]}' > "$work/bad.json"
    err=$("$rudder" validate "$work/bad.json" 2>&1) && fail "bad params accepted"
    grep -q "/dangling" <<<"$err" || fail "bad params not named: $err"
    ;;
  generate_checkpoint)
    # Public checkpoints as a user runs them: tiny random-weight MDLM and BD3-LM checkpoints in their Hugging Face
    # layout with a GPT-2-format tokenizer beside them (tests/nets/dit_checkpoint_fixture.py), a recipe naming the
    # folder, and every control satisfied in every sample. Skips without python3-torch (the fixture's exit 77).
    /usr/bin/python3 "$here/../nets/dit_checkpoint_fixture.py" "$work/ckpt" > "$work/fixture.txt" 2>&1; code=$?
    [ $code -eq 77 ] && { echo "SKIP: $(cat "$work/fixture.txt")"; exit 77; }
    [ $code -eq 0 ] || fail "fixture: exit $code: $(cat "$work/fixture.txt")"
    for name in mdlm bd3lm; do
      cp "$work/ckpt/gpt2_like_tokenizer/vocab.json" "$work/ckpt/gpt2_like_tokenizer/merges.txt" "$work/ckpt/$name/"
    done
    cat > "$work/mdlm.json" <<JSON
{ "model": "$work/ckpt/mdlm", "sampler": {"name": "analytic", "steps": 8, "prompt_guidance": 1.0}, "samples": 4, "seed": 3,
  "controllers": [ {"plugin": "length", "params": {"tokens": 10}},
                   {"plugin": "span", "params": {"prefix": "the cat", "suffix": " the river", "length": 10}},
                   {"plugin": "exclude_words", "params": {"words": ["sat"]}} ] }
JSON
    cat > "$work/bd3lm.json" <<JSON
{ "model": "$work/ckpt/bd3lm", "samples": 4, "seed": 3,
  "controllers": [ {"plugin": "length", "params": {"tokens": 11}}, {"plugin": "span", "params": {"prefix": "the cat"}},
                   {"plugin": "exclude_words", "params": {"words": ["sat"]}} ] }
JSON
    for name in mdlm bd3lm; do
      "$rudder" generate "$work/$name.json" -o "$work/$name.jsonl" 2> "$work/err.txt" || fail "$name: exit $?: $(cat "$work/err.txt")"
      [ "$(wc -l < "$work/$name.jsonl")" -eq 4 ] || fail "$name: expected 4 samples: $(cat "$work/$name.jsonl")"
      [ "$(grep -o '"satisfied":true' "$work/$name.jsonl" | wc -l)" -eq 12 ] || fail "$name: a control not satisfied: $(cat "$work/$name.jsonl")"
      grep -q '"text":"the cat' "$work/$name.jsonl" || fail "$name: the prefix: $(cat "$work/$name.jsonl")"
      "$rudder" models "$work/ckpt/$name" > "$work/models.txt" 2>&1 || fail "$name: models: $(cat "$work/models.txt")"
    done
    grep -q 'the river"' "$work/mdlm.jsonl" || fail "mdlm: the suffix: $(cat "$work/mdlm.jsonl")"
    grep -q "first_hitting" "$work/models.txt" || fail "bd3lm: its sampler not described: $(cat "$work/models.txt")"
    ;;
  missing_file)
    "$rudder" generate "$work/none.json" > /dev/null 2>&1; code=$?
    [ $code -eq 2 ] || fail "expected exit 2, got $code"
    ;;
  *) fail "unknown case $case" ;;
esac
echo "ok: $case"
