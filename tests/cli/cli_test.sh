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
    ;;
  plugins_rejected)
    out=$(RUDDER_PLUGIN_PATH="$fixtures" "$rudder" plugins --json) || fail "exit $?"
    grep -q '"id": "good"' <<<"$out" || fail "fixture plugin not found through RUDDER_PLUGIN_PATH: $out"
    grep -q 'not_a_library.so' <<<"$out" || fail "non-library not reported as rejected: $out"
    grep -q '"id": "length"' <<<"$out" || fail "first-party plugins must still be found: $out"
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
    grep -q "valid (model model, discrete, sampler analytic, 2 controllers)" <<<"$out" || fail "summary: $out"
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
    err=$("$rudder" generate -q "$work/conflict.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 1 ] || fail "expected exit 1, got $code"
    grep -q "controller 'length' fixes token id 0 at position 6, which 'span' forbids" <<<"$err" || fail "$err"
    ;;
  missing_file)
    "$rudder" generate "$work/none.json" > /dev/null 2>&1; code=$?
    [ $code -eq 2 ] || fail "expected exit 2, got $code"
    ;;
  *) fail "unknown case $case" ;;
esac
echo "ok: $case"
