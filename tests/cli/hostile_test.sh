#!/usr/bin/env bash
# What hostile files and plugins can make the CLI do (issue 50's loader and plugin findings): each case fails on the
# code before the fix. Usage: hostile_test.sh RUDDER FIXTURE_DIR CASE
set -uo pipefail
rudder=$1 fixtures=$2 case=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

printf '%s\n' "The Eagle is a pub ." "The Mill serves Italian food ." "Aromi is a coffee shop ." \
  "Zizzi is a cheap restaurant in the city centre ." > "$work/sentences.txt"
"$rudder" corpus-model "$work/sentences.txt" "$work/model" > /dev/null || fail "corpus-model failed"
cat > "$work/good.json" <<'JSON'
{ "model": "model", "family": "discrete", "sampler": {"steps": 50}, "samples": 3, "max_length": 12, "seed": 5,
  "controllers": [ {"plugin": "length", "params": {"tokens": 6}}, {"plugin": "span", "params": {"prefix": "The"}} ] }
JSON
# good.json with the faulty fixture (tests/plugins/fixtures/faulty.c) first among its controllers, with PARAMS and
# the entry's other keys EXTRA (e.g. '"isolation": "process"').
with_faulty() {
  local params=$1 extra=${2:-}
  sed "s|\"controllers\": \[|\"controllers\": [ {\"plugin\": \"faulty\", \"params\": $params${extra:+, $extra}},|" \
    "$work/good.json"
}
export RUDDER_PLUGIN_PATH=$fixtures RUDDER_CACHE_DIR=$work/cache

case $case in
  recipe_not_a_regular_file)
    # A device, a FIFO and a file over the cap are refused at once (exit 2), before anything is read.
    err=$(timeout 60 "$rudder" validate /dev/zero 2>&1); code=$?
    [ $code -eq 2 ] || fail "/dev/zero: exit $code, expected 2: $err"
    grep -q "recipe file '/dev/zero' is a character device: only regular files are read" <<<"$err" || fail "$err"
    mkfifo "$work/fifo.json"
    err=$(timeout 60 "$rudder" generate "$work/fifo.json" 2>&1); code=$?
    [ $code -eq 2 ] || fail "a FIFO: exit $code, expected 2: $err"
    grep -q "is a FIFO" <<<"$err" || fail "$err"
    head -c $((17 << 20)) /dev/zero | tr '\0' ' ' > "$work/huge.json"
    err=$(timeout 60 "$rudder" validate "$work/huge.json" 2>&1); code=$?
    [ $code -eq 2 ] || fail "17 MiB: exit $code, expected 2: $err"
    grep -q "is larger than 16 MiB, the most read from a recipe file" <<<"$err" || fail "$err"
    err=$(timeout 60 "$rudder" validate - < "$work/huge.json" 2>&1); code=$?
    [ $code -eq 2 ] || fail "17 MiB on stdin: exit $code, expected 2: $err"
    grep -q "the recipe is larger than 16 MiB" <<<"$err" || fail "$err"
    ;;
  config_not_a_regular_file)
    # A model folder whose config.json is a FIFO (a load would wait for a writer forever) or /dev/zero.
    cp -r "$work/model" "$work/fifo_model" && rm "$work/fifo_model/config.json" && mkfifo "$work/fifo_model/config.json"
    sed 's/"model": "model"/"model": "fifo_model"/' "$work/good.json" > "$work/fifo_model.json"
    err=$(timeout 60 "$rudder" validate "$work/fifo_model.json" 2>&1); code=$?
    [ $code -eq 2 ] || fail "config.json a FIFO: exit $code, expected 2: $err"
    grep -q "config.json' is a FIFO: only regular files are read" <<<"$err" || fail "$err"
    cp -r "$work/model" "$work/zero_model" && ln -sf /dev/zero "$work/zero_model/config.json"
    sed 's/"model": "model"/"model": "zero_model"/' "$work/good.json" > "$work/zero_model.json"
    err=$(timeout 60 "$rudder" validate "$work/zero_model.json" 2>&1); code=$?
    [ $code -eq 2 ] || fail "config.json /dev/zero: exit $code, expected 2: $err"
    grep -q "config.json' is a character device" <<<"$err" || fail "$err"
    ;;
  long_model_name)
    # A 10 MB model name is refused by its length, at once, without a "did you mean" over it.
    python3 -c 'import json; json.dump({"model": "m" * 10000000}, open("'"$work"'/long.json", "w"))'
    err=$(timeout 60 "$rudder" validate "$work/long.json" 2>&1); code=$?
    [ $code -eq 2 ] || fail "exit $code, expected 2: ${err:0:300}"
    grep -q "/model: 10000000 bytes long, over the limit of 4096 for a name or path" <<<"$err" || fail "${err:0:300}"
    [ ${#err} -lt 2000 ] || fail "the name was echoed: ${#err} bytes of messages"
    ;;
  plugin_exit)
    # exit(0) inside an in-process plugin's step: exit 70 naming it, never 0; -o's old file untouched.
    with_faulty '{"fault": "exit", "at_step": 3}' > "$work/exits.json"
    echo "old results" > "$work/out.jsonl"
    err=$("$rudder" generate -q "$work/exits.json" -o "$work/out.jsonl" 2>&1); code=$?
    [ $code -eq 70 ] || fail "expected exit 70, got $code: $err"
    grep -q "controller 'faulty' (faulty, rudder_faulty.so) ended the process (exit() called inside the plugin)" \
      <<<"$err" || fail "$err"
    [ "$(cat "$work/out.jsonl")" = "old results" ] || fail "the old output was changed"
    # The same to stdout: no sample, and the exit status says so.
    out=$("$rudder" generate -q "$work/exits.json" 2>/dev/null); code=$?
    [ $code -eq 70 ] && [ -z "$out" ] || fail "stdout: exit $code, output: $out"
    ;;
  plugin_stdout)
    # What an in-process plugin prints lands on stderr; stdout holds the JSON Lines only.
    with_faulty '{"fault": "print"}' > "$work/prints.json"
    "$rudder" generate -q "$work/prints.json" > "$work/out.jsonl" 2> "$work/err.txt" || fail "exit $?: $(cat "$work/err.txt")"
    [ "$(wc -l < "$work/out.jsonl")" -eq 3 ] && [ "$(grep -c '^{"controls"' "$work/out.jsonl")" -eq 3 ] \
      || fail "stdout: $(cat "$work/out.jsonl")"
    grep -q "printed by a plugin on standard output" "$work/err.txt" || fail "the plugin's line went nowhere"
    # The other commands' results still reach stdout.
    "$rudder" validate "$work/prints.json" | grep -q "valid" || fail "validate's line did not reach stdout"
    "$rudder" plugins --json | python3 -c 'import json, sys; json.load(sys.stdin)' || fail "plugins --json"
    ;;
  sigterm_in_plugin_loop)
    # An in-process plugin that never returns: SIGTERM still ends the command (exit 130, saying why).
    with_faulty "{\"fault\": \"hang\", \"at_step\": 5, \"once\": \"$work/hanging\"}" '"time_limit": 0' > "$work/hangs.json"
    # --foreground: timeout passes our TERM to rudder alone; otherwise it sends it to its process group as well, and
    # that second TERM (the handler has restored the default by then) kills rudder before its watch ends it.
    timeout --foreground -s KILL 120 "$rudder" generate -q "$work/hangs.json" -o "$work/out.jsonl" 2> "$work/err.txt" &
    pid=$!
    for _ in $(seq 1200); do [ -e "$work/hanging" ] && break; sleep 0.05; done
    [ -e "$work/hanging" ] || fail "the plugin never started to hang: $(cat "$work/err.txt")"
    sleep 0.5
    kill -TERM $pid
    wait $pid; code=$?
    [ $code -eq 130 ] || fail "expected exit 130, got $code: $(cat "$work/err.txt")"
    grep -q "interrupted inside a plugin call that did not return" "$work/err.txt" || fail "$(cat "$work/err.txt")"
    ;;
  isolated_memory_limit)
    # A controller in a process of its own may hold at most the run's --max-memory: its 4 GB allocation fails there.
    # (A sanitizer build sets no limit: its shadow memory counts toward RLIMIT_DATA.)
    host=$(dirname "$rudder")/../libexec/rudder/rudder-controller-host
    if grep -qaE "__(asan|tsan)_init" "$host"; then echo "SKIP: a sanitizer build"; exit 77; fi
    with_faulty '{"fault": "alloc", "mb": 4096}' '"isolation": "process"' > "$work/allocates.json"
    err=$("$rudder" generate -q --max-memory 2000 "$work/allocates.json" -o "$work/out.jsonl" 2>&1); code=$?
    [ $code -eq 1 ] || fail "expected exit 1, got $code: $err"
    grep -q "controller 'faulty' (faulty, rudder_faulty.so): step failed at step [0-9]* (RUDDER_ERR_OUT_OF_MEMORY): could not allocate 4096 MB" \
      <<<"$err" || fail "$err"
    # In-process the same allocation succeeds (nothing limits the host's own memory but its estimate).
    with_faulty '{"fault": "alloc", "mb": 4096}' > "$work/allocates_here.json"
    "$rudder" generate -q --max-memory 2000 "$work/allocates_here.json" -o "$work/out.jsonl" 2> "$work/err.txt" \
      || fail "in-process: exit $?: $(cat "$work/err.txt")"
    ;;
  output_partial_symlink)
    # A symlink placed at OUT.partial is removed, never followed: its target keeps its contents.
    echo "precious" > "$work/target.txt"
    ln -s "$work/target.txt" "$work/out.jsonl.partial"
    "$rudder" generate -q "$work/good.json" -o "$work/out.jsonl" || fail "exit $?"
    [ "$(cat "$work/target.txt")" = "precious" ] || fail "the symlink's target was overwritten"
    [ "$(wc -l < "$work/out.jsonl")" -eq 3 ] && [ ! -e "$work/out.jsonl.partial" ] || fail "$(ls -l "$work")"
    ;;
  output_full_disk)
    # A write that fails (here the file size limit, as a full disk would) leaves no .partial with a cut line.
    sed 's/"samples": 3/"samples": 60/' "$work/good.json" > "$work/many.json"
    err=$(trap '' XFSZ; ulimit -f 2; "$rudder" generate -q "$work/many.json" -o "$work/out.jsonl" 2>&1); code=$?
    [ $code -eq 1 ] || fail "expected exit 1, got $code: $err"
    grep -q "cannot write '$work/out.jsonl.partial': File too large" <<<"$err" || fail "$err"
    [ ! -e "$work/out.jsonl.partial" ] && [ ! -e "$work/out.jsonl" ] || fail "left behind: $(ls -l "$work")"
    ;;
  plugin_symlink_outside)
    # A symlink in a plugin folder that leads to a library outside the search path is not loaded.
    mkdir "$work/plugins"
    ln -s "$fixtures/rudder_good.so" "$work/plugins/rudder_elsewhere.so"
    out=$(RUDDER_PLUGIN_PATH="$work/plugins" "$rudder" plugins) || fail "plugins: exit $?"
    grep -q "rudder_elsewhere.so: a symlink to $fixtures/rudder_good.so, outside the folders of the plugin search path" \
      <<<"$out" || fail "$out"
    grep -q "^  good " <<<"$out" && fail "the library outside was loaded: $out"
    sed 's/"controllers": \[/"controllers": [ {"plugin": "plugins\/rudder_elsewhere.so"},/' "$work/good.json" > "$work/by_path.json"
    err=$(RUDDER_PLUGIN_PATH="$work/plugins" "$rudder" validate "$work/by_path.json" 2>&1); code=$?
    [ $code -eq 2 ] || fail "by path: exit $code, expected 2: $err"
    grep -q "not in a folder of the plugin search path" <<<"$err" || fail "$err"
    # A symlink to a library in a folder of the search path is fine.
    out=$(RUDDER_PLUGIN_PATH="$work/plugins:$fixtures" "$rudder" plugins) || fail "plugins: exit $?"
    grep -q "rudder_elsewhere.so: id 'good' already provided" <<<"$out" || grep -q "^  good " <<<"$out" || fail "$out"
    ;;
  bad_utf8_recipe)
    # Invalid UTF-8 in a recipe string is an invalid recipe (exit 2), as text and through standard input.
    printf '{"model": "model", "controllers": [{"plugin": "span", "params": {"prefix": "\xff\xfe"}}]}' > "$work/bytes.json"
    err=$("$rudder" validate "$work/bytes.json" 2>&1); code=$?
    [ $code -eq 2 ] || fail "exit $code, expected 2: $err"
    grep -q "invalid recipe" <<<"$err" || fail "$err"
    err=$("$rudder" validate - < "$work/bytes.json" 2>&1); code=$?
    [ $code -eq 2 ] || fail "stdin: exit $code, expected 2: $err"
    grep -q "invalid recipe" <<<"$err" || fail "$err"
    ;;
  generated_text_bad_utf8)
    # A vocabulary token that is not UTF-8 (a byte-level tokenizer's partial character reads the same): the JSON Lines
    # carry U+FFFD for each bad byte instead of the run failing.
    printf 'The \xff pub .\nThe \xfe mill .\n' > "$work/bytes.txt"
    "$rudder" corpus-model "$work/bytes.txt" "$work/bytes_model" > /dev/null || fail "corpus-model: exit $?"
    printf '%s' '{"model": "bytes_model", "family": "discrete", "sampler": {"steps": 10}, "samples": 2, "max_length": 8}' \
      > "$work/bytes_recipe.json"
    "$rudder" generate -q "$work/bytes_recipe.json" > "$work/out.jsonl" 2> "$work/err.txt" || fail "exit $?: $(cat "$work/err.txt")"
    python3 - "$work/out.jsonl" <<'PY' || fail "not JSON Lines with U+FFFD: $(cat "$work/out.jsonl")"
import json, sys
texts = [json.loads(line)["text"] for line in open(sys.argv[1], encoding="utf-8")]
assert len(texts) == 2 and all("\ufffd" in t for t in texts), texts
PY
    ;;
  verdict_bad_utf8)
    # A verdict detail that is not UTF-8 fails the run naming the controller.
    with_faulty '{"bad_detail": 1}' > "$work/detail.json"
    err=$("$rudder" generate -q "$work/detail.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 1 ] || fail "expected exit 1, got $code: $err"
    grep -q "controller 'faulty' (faulty, rudder_faulty.so): evaluate returned a detail that is not valid UTF-8" \
      <<<"$err" || fail "$err"
    ;;
  huge_deltas)
    # A finite delta (float32's largest) that overflows once added to the scores fails the run naming the controller.
    printf '%s' '{"model": "e2e-discrete", "sampler": {"steps": 20}, "samples": 2,
      "controllers": [{"plugin": "faulty", "params": {"delta": 3.4028235e38}}]}' > "$work/huge.json"
    err=$("$rudder" generate -q "$work/huge.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 1 ] || fail "expected exit 1, got $code: $err"
    grep -q "the controlled one is not (NaN, or no token allowed) once the logit deltas of 'faulty' (weight 1) are added" \
      <<<"$err" || fail "the controller is not named: $err"
    ;;
  *) fail "unknown case $case" ;;
esac
echo "ok: $case"
