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
  controllers_micro)
    # The whole chain on micro models: tagger and parser -> annotated E2E-like text -> a micro discrete denoiser ->
    # `train-controller` -> the pos / syntax_span / syntax_tree controllers steering and judging -> `rudder eval`.
    "$rudder" train -q "$work/tagger.json" || fail "tagger train exit $?"
    "$rudder" train -q "$work/parser.json" || fail "parser train exit $?"
    { echo "mr,ref"
      for n in Aromi Zizzi Cotto Clowns Fitzbillies; do
        echo "\"name[$n]\",\"$n serves French food.\""
        echo "\"name[$n]\",\"$n is a cheap pub.\""
        echo "\"name[$n]\",\"In the city centre, $n serves food.\""
      done; } > "$work/e2e.csv"
    "$rudder" annotate -q "$work/e2e.csv" --tagger "$work/tagger" --parser "$work/parser" -o "$work/e2e.syntax.jsonl" \
      || fail "annotate exit $?"
    cat > "$work/denoiser.json" <<JSON
{ "kind": "discrete", "data": {"train": "e2e.csv"}, "tokenizer": {"min_count": 1},
  "network": {"dim": 16, "layers": 1, "heads": 2, "ff_dim": 32},
  "training": {"steps": 30, "batch_size": 8, "lr": 0.01, "seed": 1, "threads": 1, "checkpoint_every": 0},
  "max_length": 12, "max_condition_length": 8, "out": "micro-discrete" }
JSON
    "$rudder" train -q "$work/denoiser.json" || fail "denoiser train exit $?"
    cat > "$work/classifier.json" <<JSON
{ "kind": "syntax_classifier", "denoiser": "micro-discrete", "data": {"train": "e2e.syntax.jsonl"},
  "network": {"dim": 16, "layers": 1, "heads": 2, "ff_dim": 32, "span_hidden": 8},
  "training": {"steps": 60, "batch_size": 8, "lr": 0.01, "seed": 1, "threads": 1, "log_every": 20, "checkpoint_every": 0},
  "max_length": 12, "out": "micro-discrete-syntax" }
JSON
    err=$("$rudder" train "$work/classifier.json" 2>&1); code=$?
    [ $code -eq 2 ] || fail "rudder train must refuse a syntax_classifier, got $code: $err"
    grep -q "a syntax_classifier is trained with \`rudder train-controller\`" <<<"$err" || fail "$err"
    "$rudder" train-controller "$work/classifier.json" 2>"$work/err" || fail "train-controller exit $?: $(cat "$work/err")"
    grep -q "^training syntax_classifier: 15 texts; vocabulary .*; [0-9]* tags, [0-9]* span labels" "$work/err" || fail "$(cat "$work/err")"
    # The default classifier is <model folder>-syntax, found next to the model; the judges are named.
    judges='"tagger": "tagger", "parser": "parser"'
    cat > "$work/pos.json" <<JSON
{ "model": "micro-discrete", "sampler": {"name": "analytic", "steps": 12}, "seed": 3, "samples": 3,
  "controllers": [ {"plugin": "pos", "weight": 2.0, "params": {"tags": "NNP VBZ JJ NN .", $judges}},
                   {"plugin": "syntax_span", "params": {"span": [2, 4, "NP"], $judges}},
                   {"plugin": "syntax_tree", "evaluate_only": true,
                    "params": {"tree": "(S (NP (NNP Aromi)) (VP (VBZ serves) (NP (JJ French) (NN food))) (. .))", $judges}} ] }
JSON
    out=$(cd "$work" && RUDDER_MODEL_PATH="$work" "$rudder" generate pos.json 2>"$work/err") || fail "generate exit $?: $(cat "$work/err")"
    python3 - "$out" <<'PY' || fail "generate output: $out"
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
assert len(lines) == 3, lines
for s in lines:
    c = s["controls"]
    assert set(c) == {"pos", "syntax_span", "syntax_tree"}, c
    assert 0.0 <= c["pos"]["score"] <= 1.0 and c["pos"]["satisfied"] in (True, False), c
    assert c["syntax_span"]["score"] in (0.0, 1.0), c
    assert 0.0 <= c["syntax_tree"]["score"] <= 1.0, c
PY
    # Exact candidate scoring: every sample judged, and both scorings give the same samples through the 1.2 forms
    # (rows, the host's candidates) as through the dense 1.1 buffers (every position, candidates found by the
    # controller), where a tie between candidates goes to the lower id alike.
    sed 's/"tags": "NNP VBZ JJ NN .",/"tags": "NNP VBZ JJ NN .", "scoring": "exact",/' "$work/pos.json" > "$work/pos_exact.json"
    grep -q '"scoring": "exact"' "$work/pos_exact.json" || fail "pos_exact.json: $(cat "$work/pos_exact.json")"
    for recipe in pos pos_exact; do
      (cd "$work" && RUDDER_MODEL_PATH="$work" "$rudder" generate $recipe.json > $recipe.rows.jsonl 2>"$work/err") \
        || fail "generate $recipe exit $?: $(cat "$work/err")"
      (cd "$work" && RUDDER_CONTROL_FORMS=dense RUDDER_MODEL_PATH="$work" "$rudder" generate $recipe.json > $recipe.dense.jsonl \
        2>"$work/err") || fail "generate $recipe (dense) exit $?: $(cat "$work/err")"
      cmp "$work/$recipe.rows.jsonl" "$work/$recipe.dense.jsonl" || fail "$recipe: the 1.2 and the dense forms differ"
      [ "$(grep -c '"pos":{"satisfied"' "$work/$recipe.rows.jsonl")" = 3 ] || fail "$recipe: $(cat "$work/$recipe.rows.jsonl")"
    done
    cmp -s "$work/pos.rows.jsonl" "$work/pos_exact.rows.jsonl" && fail "exact scoring changed nothing"
    sed 's/"scoring": "exact"/"scoring": "exactly"/' "$work/pos_exact.json" > "$work/bad_scoring.json"
    err=$(cd "$work" && RUDDER_MODEL_PATH="$work" "$rudder" generate bad_scoring.json 2>&1 >/dev/null); code=$?
    [ $code -ne 0 ] || fail "an unknown scoring must fail"
    grep -q '/scoring: expected "gradient" or "exact", got "exactly"' <<<"$err" || fail "$err"
    # Bad targets are refused with what is known; a classifier for another family is refused by name.
    sed 's/NNP VBZ JJ NN ./NNP XYZ/' "$work/pos.json" > "$work/bad_tag.json"
    err=$(cd "$work" && RUDDER_MODEL_PATH="$work" "$rudder" generate bad_tag.json 2>&1 >/dev/null); code=$?
    [ $code -ne 0 ] || fail "an unknown tag must fail"
    grep -q "/tags/1: unknown tag 'XYZ' (known: " <<<"$err" || fail "$err"
    sed 's/"tags": "NNP VBZ JJ NN .",/"tags": "NNP VBZ JJ NN .", "classifier": "tagger",/' "$work/pos.json" > "$work/not_classifier.json"
    err=$(cd "$work" && "$rudder" generate not_classifier.json 2>&1 >/dev/null); code=$?
    [ $code -ne 0 ] || fail "a tagger as the classifier must fail"
    grep -q "is a 'tagger' model, not a noisy syntax classifier" <<<"$err" || fail "$err"
    cat > "$work/suite.json" <<JSON
{ "teacher": "teacher", "targets": {"file": "e2e.syntax.jsonl", "count": 3, "seed": 1, "max_words": 10},
  "tasks": [ {"name": "pos, guided", "recipe": "pos.json", "control": "pos", "target": "pos"},
             {"name": "pos, unguided", "recipe": "pos.json", "control": "pos", "target": "pos", "evaluate_only": true},
             {"name": "span", "recipe": "pos.json", "control": "syntax_span", "target": "span"},
             {"name": "tree", "recipe": "pos.json", "control": "syntax_tree", "target": "tree"},
             {"name": "pos alone, weight 0", "recipe": "pos_alone.json", "control": "pos", "target": "pos", "weight": 0},
             {"name": "pos alone, unguided", "recipe": "pos_alone.json", "control": "pos", "target": "pos", "evaluate_only": true},
             {"name": "pos alone, unguided, model by folder", "recipe": "pos_alone.json", "model": "copies/micro-discrete",
              "control": "pos", "target": "pos", "evaluate_only": true},
             {"name": "span, remasking", "recipe": "pos.json", "control": "syntax_span", "target": "span",
              "sampler": {"steps": 24, "remask": {"strategy": "cap", "eta": 0.2}}} ] }
JSON
    python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); r["controllers"] = r["controllers"][:1]; print(json.dumps(r))' \
      "$work/pos.json" > "$work/pos_alone.json" || fail "pos_alone.json"
    cat > "$work/teacher.json" <<JSON
{ "kind": "teacher", "data": {"train": "e2e.csv"}, "network": {"dim": 16, "layers": 1, "heads": 2},
  "training": {"steps": 20, "batch_size": 8, "seed": 1, "threads": 1, "checkpoint_every": 0}, "max_length": 12, "out": "teacher" }
JSON
    "$rudder" train -q "$work/teacher.json" || fail "teacher train exit $?"
    mkdir -p "$work/copies" && cp -r "$work/micro-discrete" "$work/copies/" || fail "copy"
    out=$(cd "$work" && RUDDER_MODEL_PATH="$work" "$rudder" eval suite.json -o results 2>"$work/err") || fail "eval exit $?: $(cat "$work/err")"
    grep -q "^| pos, guided | discrete | 3 | pos: [0-9.]*% / [0-9.]*; syntax_span: .*syntax_tree: .* | [0-9.]* | [0-9.]* | [0-9.]* |$" <<<"$out" || fail "$out"
    grep -q "^| pos, unguided | discrete | 3 |" <<<"$out" || fail "$out"
    python3 - "$work/results" <<'PY' || fail "results: $(cat "$work/results/results.json")"
import json, sys, os
d = sys.argv[1]
r = json.load(open(os.path.join(d, "results.json")))
tasks = {t["task"]: t for t in r["tasks"]}
assert set(tasks) == {"pos, guided", "pos, unguided", "span", "tree", "pos alone, weight 0", "pos alone, unguided",
                      "pos alone, unguided, model by folder", "span, remasking"}, tasks
for name, t in tasks.items():
    assert t["targets"] == 3 and t["samples"] == 3 and t["teacher_perplexity"] > 1 and t["seconds_per_sample"] > 0, t
    assert t["controls"]["pos"]["judged"] == 3, t
    if name == "span, remasking":
        # The task's sampler settings took: 24 steps, and remasked positions drawn again.
        assert 1 <= t["network_evaluations_per_sample"] <= 24 and t["rows_drawn_per_sample"] > 12, t
    else:
        # 12 steps over 12 positions: a network call per step that draws, each position drawn once.
        assert 1 <= t["network_evaluations_per_sample"] <= 12 and t["rows_drawn_per_sample"] == 12, t
# The task's weight took: at weight 0 the recipe's one control steers nothing, as if it only judged.
texts = lambda name: [json.loads(l)["text"] for l in open(os.path.join(d, "samples", name + ".jsonl"))]
assert texts("pos-alone--weight-0") == texts("pos-alone--unguided"), (texts("pos-alone--weight-0"), texts("pos-alone--unguided"))
# The task's model took: the same weights from a folder named relative to the suite give the same texts.
assert texts("pos-alone--unguided--model-by-folder") == texts("pos-alone--unguided")
samples = [json.loads(l) for l in open(os.path.join(d, "samples", "span.jsonl"))]
assert len(samples) == 3 and all(len(s["target"]["params"]["syntax_span"]["span"]) == 3 and s["target"]["reference"] for s in samples), samples
PY
    printf '{"tasks": [{"name": "x", "recipe": "nowhere.json", "target": "tree", "weight": 2, "sampler": 3, "guidance": []}], "teacher": 3}\n' > "$work/bad_suite.json"
    err=$("$rudder" eval "$work/bad_suite.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 2 ] || fail "expected exit 2, got $code: $err"
    for want in "/teacher: expected" "/tasks/0/control: required with a target" "/tasks/0/recipe: no recipe file" \
                "/tasks/0/targets: no target file" "/tasks/0/weight: needs \"control\"" "/tasks/0/sampler: expected" "/tasks/0/guidance: expected"; do
      grep -qF "$want" <<<"$err" || fail "missing '$want' in: $err"
    done
    # A task's model replaces the recipe's: one that is not there is named.
    printf '{"teacher": "teacher", "targets": {"file": "e2e.syntax.jsonl", "count": 1}, "tasks": [{"name": "x", "recipe": "pos_alone.json", "model": "copies/nowhere", "control": "pos", "target": "pos"}]}\n' > "$work/no_model_suite.json"
    err=$(cd "$work" && RUDDER_MODEL_PATH="$work" "$rudder" eval no_model_suite.json -o no_model 2>&1 >/dev/null); code=$?
    [ $code -ne 0 ] || fail "a missing task model must fail"
    grep -qF "/model: model directory 'copies/nowhere' does not exist" <<<"$err" || fail "$err"
    ;;
  *) fail "unknown case $case" ;;
esac
echo "ok: $case"
