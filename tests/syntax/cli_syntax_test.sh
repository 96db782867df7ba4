#!/usr/bin/env bash
# `rudder train` (tagger, parser), `rudder annotate` and `rudder eval-annotator` as a user runs them: exit codes,
# output, messages. Usage: cli_syntax_test.sh RUDDER CASE
set -uo pipefail
rudder=$1 case=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A micro treebank (20 trees) and micro configs: each trains in a second or two.
for n in Aromi Zizzi Cotto Clowns Fitzbillies; do
  echo "(ROOT (S (NP (NNP $n)) (VP (VBZ serves) (NP (JJ French) (NN food))) (. .)))"
  echo "(ROOT (S (NP (NNP $n)) (VP (VBZ is) (NP (DT a) (JJ cheap) (NN pub))) (. .)))"
  echo "(ROOT (S (PP (IN In) (NP (DT the) (NN city) (NN centre))) (, ,) (NP (NNP $n)) (VP (VBZ serves) (NP (NN food))) (. .)))"
  echo "(ROOT (NP (NP (NNP $n)) (, ,) (NP (DT a) (NN pub) (PP (IN near) (NP (DT the) (NN river))))))"
done > "$work/train.ptb"
config() {  # KIND STEPS TRAIN_FILE
  cat <<JSON
{ "kind": "$1", "data": {"train": "$3"},
  "network": {"word_dim": 16, "feature_dim": 8, "buckets": 512, "hidden": 24, "layers": 1, "dropout": 0, "word_dropout": 0},
  "training": {"steps": $2, "batch_size": 8, "lr": 0.02, "seed": 3, "threads": 1, "log_every": 20, "checkpoint_every": 0},
  "max_length": 20, "out": "$1" }
JSON
}
config tagger 60 train.ptb > "$work/tagger.json"
config parser 120 train.ptb > "$work/parser.json"

case $case in
  train_annotate_eval)
    "$rudder" train "$work/tagger.json" 2>"$work/err" || fail "tagger train exit $?: $(cat "$work/err")"
    grep -q "^training tagger: 20 sentences; vocabulary .*; 8 PTB tags, 0 universal tags" "$work/err" || fail "$(cat "$work/err")"
    "$rudder" train "$work/parser.json" 2>"$work/err" || fail "parser train exit $?: $(cat "$work/err")"
    grep -q "^training parser: 20 sentences; .*; 4 span labels" "$work/err" || fail "$(cat "$work/err")"
    grep -q "^step 120/120  loss " "$work/err" || fail "$(cat "$work/err")"
    printf '%s\n' '{"text": "Wildwood serves French food."}' '{"text": ""}' '{"text": "It'"'"'s a cheap pub near the river."}' \
      > "$work/texts.jsonl"
    out=$("$rudder" annotate "$work/texts.jsonl" --tagger "$work/tagger" --parser "$work/parser" 2>"$work/err") \
      || fail "annotate exit $?: $(cat "$work/err")"
    grep -q "^annotated 3 texts in [0-9.]* s ([0-9.]* texts/s)" "$work/err" || fail "$(cat "$work/err")"
    python3 - "$out" <<'PY' || fail "annotate output: $out"
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
assert len(lines) == 3, lines
a, empty, b = lines
assert a["text"] == "Wildwood serves French food." and a["words"] == ["Wildwood", "serves", "French", "food", "."], a
assert a["pos"] == ["NNP", "VBZ", "JJ", "NN", "."], a
assert a["tree"] == "(S (NP (NNP Wildwood)) (VP (VBZ serves) (NP (JJ French) (NN food))) (. .))", a
assert empty == {"text": "", "words": [], "pos": [], "tree": None}, empty
# "It's" is one word; its tag joins the tags of "It" and "'s".
assert b["words"][0] == "It's" and len(b["pos"]) == 8 and "+" in b["pos"][0], b
assert b["tree"].count("(") == b["tree"].count(")") and "It's" in b["tree"], b
PY
    out=$("$rudder" annotate "$work/texts.jsonl" --tagger "$work/tagger" --tags-only -q -o "$work/tags.jsonl" 2>&1) || fail "exit $?: $out"
    [ -z "$out" ] || fail "-q must be quiet: $out"
    # Keys in reading order.
    grep -q '^{"text":"Wildwood serves French food.","words":\[.*\],"pos":\[.*\],"tree":null}$' "$work/tags.jsonl" || fail "$(cat "$work/tags.jsonl")"
    json=$("$rudder" eval-annotator "$work/parser" "$work/train.ptb" --json) || fail "eval parser exit $?"
    python3 -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["f1"]==1.0 and r["sentences"]==20 and r["gold_brackets"]==r["matched_brackets"]>0, r' "$json" \
      || fail "$json"
    out=$("$rudder" eval-annotator "$work/tagger" "$work/train.ptb") || fail "eval tagger exit $?"
    grep -q "^PTB tag accuracy 100.00% (135 of 135 tokens, 20 sentences)$" <<<"$out" || fail "$out"
    ;;
  train_errors)
    touch "$work/train.conllu"
    config parser 10 train.conllu > "$work/bad.json"
    err=$("$rudder" train "$work/bad.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 2 ] || fail "expected exit 2, got $code: $err"
    grep -q "/data/train: the parser trains on constituency trees (.ptb, .mrg, .tree, .trees, optionally .gz); got 'train.conllu'" <<<"$err" || fail "$err"
    printf '%s\n' "(ROOT (S (NP (NNP Aromi)) (VP (VBZ serves))))" "" "(ROOT (S (NP (NNP Aromi) (VP (VBZ serves)))" > "$work/broken.ptb"
    config parser 10 broken.ptb > "$work/broken.json"
    err=$("$rudder" train "$work/broken.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 1 ] || fail "expected exit 1, got $code: $err"
    grep -q "broken.ptb:3:7: this '(' is never closed" <<<"$err" || fail "$err"
    ;;
  annotate_errors)
    echo "Aromi serves food." > "$work/texts.txt"
    err=$(RUDDER_MODEL_PATH="$work" "$rudder" annotate "$work/texts.txt" --tagger no-such-tagger 2>&1 >/dev/null); code=$?
    [ $code -eq 1 ] || fail "expected exit 1, got $code: $err"
    grep -q "no model named 'no-such-tagger'" <<<"$err" || fail "$err"
    grep -q "rudder train examples/train/tagger.json" <<<"$err" || fail "$err"
    config parser 2 train.ptb > "$work/parser.json"  # any parser will do
    "$rudder" train -q "$work/parser.json" || fail "parser train exit $?"
    err=$("$rudder" annotate "$work/texts.txt" --tagger "$work/parser" --tags-only 2>&1 >/dev/null); code=$?
    [ $code -eq 1 ] || fail "expected exit 1, got $code: $err"
    grep -q "is a 'parser' model, not a part-of-speech tagger" <<<"$err" || fail "$err"
    printf '1\tA\ta\tDET\tDT\t_\t0\troot\t_\t_\n' > "$work/one.conllu"
    err=$("$rudder" eval-annotator "$work/parser" "$work/one.conllu" 2>&1 >/dev/null); code=$?
    [ $code -eq 1 ] || fail "expected exit 1, got $code: $err"
    grep -q "a parser is scored against constituency trees" <<<"$err" || fail "$err"
    ;;
  *) fail "unknown case $case" ;;
esac
echo "ok: $case"
