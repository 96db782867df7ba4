#!/usr/bin/env bash
# `rudder train` and `rudder score` as a user runs them: exit codes, output, messages. Usage: cli_train_test.sh RUDDER CASE
set -uo pipefail
rudder=$1 case=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A micro E2E training set and a micro teacher config (trains in about a second).
{
  echo "mr,ref"
  for name in "The Eagle" "Aromi" "The Mill" "Zizzi" "Cotto"; do
    for food in French Italian Chinese; do
      echo "\"name[$name], food[$food]\",\"$name serves $food food.\""
      echo "\"name[$name], food[$food]\",\"$name is a $food restaurant.\""
    done
  done
} > "$work/train.csv"
cat > "$work/teacher.json" <<'JSON'
{ "kind": "teacher", "data": {"train": "train.csv"},
  "network": {"dim": 16, "layers": 1, "heads": 2},
  "training": {"steps": 20, "batch_size": 8, "lr": 0.01, "threads": 1, "log_every": 5, "checkpoint_every": 0},
  "max_length": 12, "out": "model" }
JSON
train() { "$rudder" train "$work/teacher.json" "$@"; }
# Trains a micro denoiser of kind $1 into $work/$2 (config $work/$2.json) with the network keys $3 added to the teacher's.
train_micro() {
  sed "s/\"kind\": \"teacher\"/\"kind\": \"$1\"/; s/\"out\": \"model\"/\"out\": \"$2\"/" "$work/teacher.json" |
    sed "s/\"network\": {\"dim\": 16, \"layers\": 1, \"heads\": 2}/\"network\": {\"dim\": 16, \"layers\": 1, \"heads\": 2, $3}/" \
    > "$work/$2.json"
  "$rudder" train -q "$work/$2.json" || fail "train $2 exit $?"
}
# `rudder validate` must refuse the recipe $1 edited by the sed expression $2 (exit 2) with a message matching $3.
refused_recipe() {
  sed "$2" "$work/$1" > "$work/edited.json"
  local err code
  err=$("$rudder" validate "$work/edited.json" 2>&1); code=$?
  [ $code -eq 2 ] || fail "expected exit 2, got $code: $err"
  grep -q -- "$3" <<<"$err" || fail "$err"
}

case $case in
  train_and_score)
    out=$(train 2>"$work/err") || fail "train exit $?: $(cat "$work/err")"
    [ -z "$out" ] || fail "train must print nothing on stdout: $out"
    grep -q "^training teacher: 30 texts; vocabulary " "$work/err" || fail "no summary: $(cat "$work/err")"
    grep -q "^step 20/20  loss [0-9.]*  lr .*steps/s" "$work/err" || fail "no progress line: $(cat "$work/err")"
    grep -q "^wrote model '.*model'" "$work/err" || fail "no final line: $(cat "$work/err")"
    for f in config.json vocab.txt model.safetensors train_log.jsonl; do [ -s "$work/model/$f" ] || fail "missing $f"; done
    printf '%s\n' '{"index":0,"text":"Aromi serves French food."}' '{"index":1,"text":"Zizzi is a Chinese restaurant."}' \
      '{"index":2,"text":"Cotto serves Italian food."}' > "$work/samples.jsonl"
    json=$("$rudder" score "$work/samples.jsonl" --teacher "$work/model" --json) || fail "score exit $?"
    python3 - "$json" <<'PY' || fail "score --json: $json"
import json, math, sys
r = json.loads(sys.argv[1])
assert r["texts"] == 3 and r["tokens"] == 6 + 7 + 6 and r["unknown_tokens"] == 0, r
assert math.isfinite(r["perplexity"]) and r["perplexity"] > 1, r
assert abs(math.exp(r["mean_nll"]) - r["perplexity"]) < 1e-6 * r["perplexity"], r
PY
    ;;
  score_plain_text)
    train -q || fail "train exit $?"
    printf '%s\n' "Aromi serves French food." "Quux serves French food." > "$work/texts.txt"
    out=$("$rudder" score "$work/texts.txt" --teacher "$work/model") || fail "score exit $?"
    grep -q "^perplexity [0-9.]* over 2 texts (12 tokens including one end token per text" <<<"$out" || fail "$out"
    grep -q "^unknown words scored as <unk>: 1$" <<<"$out" || fail "$out"
    # 10 words (5 each, "." apart): 6 different unigrams, 5 of 8 bigrams, 4 of 6 trigrams.
    grep -q "^mean words per text 5.00; distinct-1 0.6000, distinct-2 0.6250, distinct-3 0.6667 " <<<"$out" || fail "$out"
    ;;
  score_against)
    # Memorisation: texts that copy a reference text word for word (spacing aside) are counted, from E2E CSV.
    train -q || fail "train exit $?"
    printf '%s\n' "Aromi serves French food ." "Aromi serves French food." "Aromi serves Chinese food and wine." > "$work/texts.txt"
    out=$("$rudder" score "$work/texts.txt" --teacher "$work/model" --against "$work/train.csv") || fail "score exit $?"
    grep -q "^distinct texts: 2 of 3$" <<<"$out" || fail "$out"
    grep -q "^verbatim copies of a text in .*train.csv: 2 of 3 (66.7%)$" <<<"$out" || fail "$out"
    json=$("$rudder" score "$work/train.csv" --teacher "$work/model" --against "$work/train.csv" --json) || fail "exit $?"
    grep -q '"copies":30,"copy_share":1.0' <<<"$json" || fail "the training refs scored against themselves: $json"
    err=$("$rudder" score "$work/texts.txt" --teacher "$work/model" --against "$work/none.csv" 2>&1); code=$?
    [ $code -eq 2 ] || fail "expected exit 2 for a missing --against file, got $code: $err"
    ;;
  train_bad_config)
    cat > "$work/bad.json" <<'JSON'
{ "kind": "teacher", "data": {"train": "train.csv"}, "network": {}, "training": {"steps": 10, "lr": "fast"}, "out": "m" }
JSON
    err=$("$rudder" train "$work/bad.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 2 ] || fail "expected exit 2, got $code: $err"
    grep -q "bad.json: invalid config (1 problem)" <<<"$err" || fail "$err"
    grep -q '/training/lr: expected a number > 0 and <= 1, got "fast"' <<<"$err" || fail "$err"
    ;;
  train_resume_message)
    train --stop-after 5 2>"$work/err" || fail "first run exit $?: $(cat "$work/err")"
    grep -q "stopped after step 5 as asked" "$work/err" || fail "$(cat "$work/err")"
    [ -f "$work/model/checkpoint/state.json" ] || fail "no checkpoint"
    # A snapshot of the stopped run is a model folder; the run is left to resume.
    train --snapshot "$work/snap" 2>"$work/err" || fail "snapshot exit $?: $(cat "$work/err")"
    grep -q "^wrote the model of '.*model' at step 5 of 20 to '.*snap'" "$work/err" || fail "$(cat "$work/err")"
    grep -q '"snapshot_of"' "$work/snap/config.json" || fail "$(cat "$work/snap/config.json")"
    train --snapshot "$work/snap2" --stop-after 3 2>"$work/err" && fail "--snapshot with --stop-after was accepted"
    grep -q "excludes" "$work/err" || fail "$(cat "$work/err")"
    # Raw weights need a snapshot, and a run with a moving average (this teacher run keeps none).
    train --raw-weights 2>"$work/err" && fail "--raw-weights without --snapshot was accepted"
    grep -q "requires --snapshot" "$work/err" || fail "$(cat "$work/err")"
    train --snapshot "$work/snap3" --raw-weights 2>"$work/err"; code=$?
    [ $code -eq 2 ] || fail "expected exit 2 for raw weights of a run without training.ema, got $code: $(cat "$work/err")"
    grep -q "/training/ema: raw weights are for a snapshot" "$work/err" || fail "$(cat "$work/err")"
    train 2>"$work/err" || fail "resumed run exit $?: $(cat "$work/err")"
    grep -q "^resuming from the checkpoint at step 5 in '.*checkpoint'" "$work/err" || fail "$(cat "$work/err")"
    grep -q "^15 steps in " "$work/err" || fail "$(cat "$work/err")"
    ;;
  score_no_teacher)
    echo "Aromi serves food." > "$work/texts.txt"
    err=$(RUDDER_MODEL_PATH="$work" "$rudder" score "$work/texts.txt" --teacher no-such-teacher 2>&1 >/dev/null); code=$?
    [ $code -eq 1 ] || fail "expected exit 1, got $code: $err"
    grep -q "no model named 'no-such-teacher'" <<<"$err" || fail "$err"
    grep -q "rudder train examples/train/teacher.json" <<<"$err" || fail "$err"
    ;;
  denoiser_generate)
    # A trained model directory is a recipe's model: train a micro discrete denoiser, generate from it with
    # controls, and refuse a teacher directory as a diffusion model.
    sed 's/"kind": "teacher"/"kind": "discrete"/; s/"out": "model"/"out": "denoiser"/' "$work/teacher.json" > "$work/disc.json"
    "$rudder" train "$work/disc.json" 2>"$work/err" || fail "train exit $?: $(cat "$work/err")"
    cat > "$work/recipe.json" <<'JSON'
{ "model": "denoiser", "sampler": {"steps": 20}, "samples": 2, "max_length": 12,
  "controllers": [ {"plugin": "length", "params": {"tokens": 5}}, {"plugin": "span", "params": {"prefix": "Aromi"}} ] }
JSON
    out=$("$rudder" generate -q "$work/recipe.json") || fail "generate exit $?"
    [ "$(grep -c '"controls":{"length":{"satisfied":true,"score":5.0},"span":{"satisfied":true,"score":1.0}}' <<<"$out")" -eq 2 ] || fail "$out"
    # Without max_length a recipe gets the network's 12 learned positions (64 would fail in the network); more
    # than 12 is refused up front.
    sed 's/, "max_length": 12//' "$work/recipe.json" > "$work/no_length.json"
    out=$("$rudder" generate -q "$work/no_length.json" -n 1) || fail "generate without max_length: exit $?"
    grep -q '"length":{"satisfied":true' <<<"$out" || fail "$out"
    sed 's/"max_length": 12/"max_length": 20/' "$work/recipe.json" > "$work/too_long.json"
    err=$("$rudder" validate "$work/too_long.json" 2>&1); code=$?
    [ $code -eq 2 ] || fail "expected exit 2, got $code: $err"
    grep -q "/max_length: model 'denoiser' handles at most 12 positions; asked for 20" <<<"$err" || fail "$err"
    train 2>"$work/err" || fail "teacher train exit $?: $(cat "$work/err")"
    sed 's/"model": "denoiser"/"model": "model"/' "$work/recipe.json" > "$work/teacher_recipe.json"
    err=$("$rudder" validate "$work/teacher_recipe.json" 2>&1); code=$?
    [ $code -eq 2 ] || fail "expected exit 2, got $code: $err"
    grep -q "/model: .* is a teacher language model" <<<"$err" || fail "$err"
    ;;
  cdcd_generate)
    # A micro CDCD denoiser through the CLI: config.json carries its learned warp, the model loads, hard
    # constraints and classifier-free guidance (which reads the self-conditioning too) run on it, and `rudder
    # likelihood` gives the Gaussian chain's bound.
    train_micro continuous cdcd '"embed_dim": 8, "objective": "cdcd", "self_conditioning": true, "schedule": {"name": "cdcd", "T": 200, "warp_bins": 10}'
    python3 - "$work/cdcd/config.json" <<'PY' || fail "config.json: $(cat "$work/cdcd/config.json")"
import json, sys
c = json.load(open(sys.argv[1]))
w = c["schedule"]["warp"]
assert c["schedule"]["name"] == "cdcd" and c["network"]["objective"] == "cdcd", c
assert len(w) == 11 and w[0] == 0 and abs(w[-1] - 1) < 1e-12 and all(a <= b for a, b in zip(w, w[1:])), w
PY
    cat > "$work/cdcd_recipe.json" <<'JSON'
{ "model": "cdcd", "sampler": {"name": "ddim", "steps": 20, "eta": 0, "x0": "interpolate"}, "samples": 3, "max_length": 12,
  "controllers": [ {"plugin": "length", "params": {"tokens": 5}}, {"plugin": "span", "params": {"prefix": "Aromi"}},
                   {"plugin": "cfg", "params": {"condition": "name[Aromi], food[French]", "gamma": 2}} ] }
JSON
    out=$("$rudder" generate -q "$work/cdcd_recipe.json") || fail "generate exit $?"
    [ "$(grep -c '"length":{"satisfied":true,"score":5.0},"span":{"satisfied":true,"score":1.0}' <<<"$out")" -eq 3 ] || fail "$out"
    out=$("$rudder" models "$work/cdcd") || fail "models exit $?"
    grep -q "kind: continuous denoiser trained as CDCD" <<<"$out" || fail "$out"
    out=$("$rudder" likelihood "$work/cdcd" "$work/train.csv" --draws 4 --json -q) || fail "likelihood exit $?"
    python3 -c 'import json, sys; r = json.loads(sys.argv[1]); assert r["bound"] == "ddpm_vlb" and r["texts"] > 0 and r["nats_per_token"] > 0, r' "$out" \
      || fail "$out"
    # Stored as float16 (its float64 warp statistics kept), it still loads and samples.
    "$rudder" convert-weights "$work/cdcd" >/dev/null || fail "convert exit $?"
    out=$("$rudder" generate -q "$work/cdcd_recipe.json") || fail "generate after convert-weights exit $?"
    [ "$(grep -c '"length":{"satisfied":true,"score":5.0},"span":{"satisfied":true,"score":1.0}' <<<"$out")" -eq 3 ] || fail "$out"
    ;;
  uniform_generate)
    # A micro SEDD denoiser with uniform noise through the CLI: it samples with every position redrawn at each step,
    # hard constraints and classifier-free guidance hold, samplers that unmask are refused, and `rudder likelihood`
    # gives SEDD's bound.
    train_micro discrete uniform '"objective": "score_entropy", "graph": "uniform"'
    cat > "$work/uniform_recipe.json" <<'JSON'
{ "model": "uniform", "sampler": {"name": "analytic", "steps": 20, "top_k": 50}, "samples": 3, "max_length": 12,
  "controllers": [ {"plugin": "length", "params": {"tokens": 5}}, {"plugin": "span", "params": {"prefix": "Aromi"}},
                   {"plugin": "exclude_words", "params": {"words": ["French"]}},
                   {"plugin": "cfg", "params": {"condition": "name[Aromi], food[Italian]", "gamma": 2}} ] }
JSON
    out=$("$rudder" generate -q "$work/uniform_recipe.json") || fail "generate exit $?"
    [ "$(grep -c '"exclude_words":{"satisfied":true,[^}]*},"length":{"satisfied":true,"score":5.0},"span":{"satisfied":true,"score":1.0}' <<<"$out")" -eq 3 ] || fail "$out"
    sed 's/"name": "analytic"/"name": "euler"/' "$work/uniform_recipe.json" > "$work/uniform_euler.json"
    "$rudder" generate -q "$work/uniform_euler.json" > /dev/null || fail "euler exit $?"
    refused_recipe uniform_recipe.json 's/"name": "analytic", "steps": 20/"name": "first_hitting"/' \
      "/sampler/name: model 'uniform' diffuses with uniform noise"
    out=$("$rudder" likelihood "$work/uniform" "$work/train.csv" --draws 4 2>"$work/err") || fail "likelihood exit $?"
    grep -q "^bound: SEDD's (uniform noise" <<<"$out" || fail "$out"
    # Progress into a file: whole lines, the last one the total (a terminal's carriage returns would run together).
    grep -q "^\([0-9]*\)/\1 texts$" "$work/err" && ! grep -q $'\r' "$work/err" || fail "progress: $(cat -A "$work/err")"
    grep -q "^negative ELBO [0-9.]* nats per token" <<<"$out" || fail "$out"
    out=$("$rudder" models "$work/uniform") || fail "models exit $?"
    grep -q "sampling: uniform noise" <<<"$out" || fail "$out"
    ;;
  cfg_generate)
    # Classifier-free guidance on a micro conditional denoiser: it runs and judges; bad params and a model without
    # a condition are refused with messages that say why.
    sed 's/"kind": "teacher"/"kind": "discrete"/; s/"out": "model"/"out": "denoiser"/' "$work/teacher.json" > "$work/disc.json"
    "$rudder" train -q "$work/disc.json" || fail "train exit $?"
    cat > "$work/cfg.json" <<'JSON'
{ "model": "denoiser", "sampler": {"steps": 20}, "samples": 3, "max_length": 12,
  "controllers": [ {"plugin": "cfg", "params": {"condition": "name[Aromi], food[French]", "gamma": 2}} ] }
JSON
    out=$("$rudder" generate -q "$work/cfg.json") || fail "generate exit $?"
    python3 - "$out" <<'PY' || fail "cfg output: $out"
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
assert len(lines) == 3, lines
for s in lines:
    v = s["controls"]["cfg"]
    words = s["text"].lower()
    want = ("aromi" in words) + ("french" in words)
    assert v["score"] == want / 2 and v["satisfied"] == (want == 2), s
PY
    refused_recipe cfg.json 's/"name\[Aromi\], food\[French\]"/"name Aromi"/' \
      '/controllers/0/params.*/condition: meaning representation "name Aromi": expected attribute\[value\]'
    refused_recipe cfg.json 's/"gamma": 2/"gamma": -1/' "/gamma: expected a number in \[0, 100\], got -1"
    # `rudder eval` with meaning-representation targets from E2E CSV and a per-task gamma.
    train -q || fail "teacher train exit $?"
    cat > "$work/suite.json" <<'JSON'
{ "teacher": "model", "targets": {"file": "train.csv", "count": 2, "seed": 4},
  "tasks": [ {"name": "g0", "recipe": "cfg.json", "control": "cfg", "target": "mr", "params": {"gamma": 0}},
             {"name": "g4", "recipe": "cfg.json", "control": "cfg", "target": "mr", "params": {"gamma": 4}} ] }
JSON
    "$rudder" eval -q "$work/suite.json" -o "$work/results" >/dev/null || fail "eval exit $?"
    python3 - "$work/results" <<'PY' || fail "eval samples: $(cat "$work"/results/samples/*.jsonl)"
import json, os, sys
d = sys.argv[1]
for task in ("g0", "g4"):
    samples = [json.loads(l) for l in open(os.path.join(d, "samples", task + ".jsonl"))]
    assert len(samples) == 2, samples  # one sample per target
    for s in samples:
        assert s["target"]["params"]["cfg"]["condition"].startswith("name[") and s["target"]["reference"], s
        assert 0 <= s["controls"]["cfg"]["score"] <= 1, s
r = json.load(open(os.path.join(d, "results.json")))
assert [t["task"] for t in r["tasks"]] == ["g0", "g4"] and all(t["targets"] == 2 for t in r["tasks"]), r
PY
    printf '%s\n' "Aromi serves French food." "Zizzi is a pub." > "$work/corpus.txt"
    "$rudder" corpus-model "$work/corpus.txt" "$work/corpus" >/dev/null 2>&1 || fail "corpus-model exit $?"
    sed 's/"model": "denoiser"/"model": "corpus", "family": "discrete"/' "$work/cfg.json" > "$work/uncond.json"
    err=$("$rudder" generate -q "$work/uncond.json" 2>&1 >/dev/null); code=$?
    [ $code -eq 1 ] || fail "expected exit 1, got $code: $err"
    grep -q "the model takes no condition" <<<"$err" || fail "$err"
    ;;
  attribute_eval)
    # The attribute controls on a micro conditional denoiser: an attribute_classifier trained noisy (guidance) and
    # clean (the judge) -> sentiment and semantic generating and judging -> `rudder eval` with sentiment, fields,
    # length, prefix and infill targets, a composition ("all") and BLEU. Bad configs and targets say why.
    { echo "mr,ref"
      for name in Aromi Zizzi Cotto Clowns; do
        echo "\"name[$name], customer rating[low], food[French]\",\"$name serves French food and has a low customer rating .\""
        echo "\"name[$name], customer rating[high], food[Italian]\",\"$name serves Italian food and has a high customer rating .\""
        echo "\"name[$name], customer rating[1 out of 5], area[riverside]\",\"$name is by the riverside , rated 1 out of 5 .\""
        echo "\"name[$name], customer rating[5 out of 5], area[city centre]\",\"$name is in the city centre , rated 5 out of 5 .\""
        echo "\"name[$name], customer rating[average]\",\"$name has an average customer rating .\""
      done; } > "$work/rated.csv"
    sed 's/"kind": "teacher"/"kind": "discrete"/; s/"out": "model"/"out": "denoiser"/; s/"train.csv"/"rated.csv"/; s/"max_length": 12/"max_length": 14/' \
      "$work/teacher.json" > "$work/disc.json"
    "$rudder" train -q "$work/disc.json" || fail "denoiser train exit $?"
    sed 's/"train.csv"/"rated.csv"/; s/"max_length": 12/"max_length": 14/' "$work/teacher.json" > "$work/teacher14.json"
    "$rudder" train -q "$work/teacher14.json" || fail "teacher train exit $?"
    cat > "$work/sentiment.json" <<'JSON'
{ "kind": "attribute_classifier", "denoiser": "denoiser",
  "data": {"train": "rated.csv", "dev": "rated.csv", "dev_every": 20,
           "attribute": {"field": "customer rating", "classes": {"negative": ["low", "1 out of 5"], "positive": ["high", "5 out of 5"]}}},
  "network": {"dim": 16, "layers": 1, "heads": 2, "ff_dim": 32},
  "training": {"steps": 40, "batch_size": 8, "lr": 0.01, "seed": 1, "threads": 1, "log_every": 20, "checkpoint_every": 0},
  "max_length": 14, "out": "denoiser-sentiment" }
JSON
    "$rudder" train-controller "$work/sentiment.json" 2>"$work/err" || fail "train-controller exit $?: $(cat "$work/err")"
    grep -q '^training attribute_classifier: 16 texts; .*classes \["negative","positive"\], 4 texts with no class dropped; dev loss' "$work/err" \
      || fail "summary: $(cat "$work/err")"
    grep -q "^step 40/40  loss [0-9.]*  dev [0-9.]* (accuracy [0-9.]*)" "$work/err" || fail "no dev accuracy: $(cat "$work/err")"
    sed 's/"out": "denoiser-sentiment"/"out": "judge"/; s/"ff_dim": 32}/"ff_dim": 32, "noise": false}/' "$work/sentiment.json" > "$work/judge.json"
    "$rudder" train-controller -q "$work/judge.json" || fail "judge train exit $?"
    python3 - "$work" <<'PY' || fail "classifier configs"
import json, sys
for name, noisy in (("denoiser-sentiment", True), ("judge", False)):
    c = json.load(open(f"{sys.argv[1]}/{name}/config.json"))
    assert c["type"] == "attribute_classifier" and c["network"]["classes"] == ["negative", "positive"], c
    assert c["network"].get("noise", True) == noisy and "tags" not in c["network"], c
    assert 0 <= c["training"]["dev_accuracy"] <= 1, c
PY
    cat > "$work/attr.json" <<'JSON'
{ "model": "denoiser", "sampler": {"steps": 14}, "seed": 2, "samples": 3, "max_length": 14,
  "controllers": [ {"plugin": "sentiment", "weight": 5.0, "params": {"polarity": "positive", "judge": "judge", "top_k": 50}},
                   {"plugin": "semantic", "params": {"fields": ["food[Italian]"], "gamma": 2}},
                   {"plugin": "length", "params": {"tokens": 10}},
                   {"plugin": "span", "params": {"prefix": "Aromi"}} ] }
JSON
    out=$(cd "$work" && RUDDER_MODEL_PATH="$work" "$rudder" generate -q attr.json) || fail "generate exit $?"
    python3 - "$out" <<'PY' || fail "generate output: $out"
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
assert len(lines) == 3, lines
for s in lines:
    c = s["controls"]
    assert 0 <= c["sentiment"]["score"] <= 1 and c["sentiment"]["satisfied"] in (True, False), c
    assert c["semantic"]["satisfied"] == ("italian" in s["text"].lower()), s
    assert c["length"]["satisfied"] and c["span"]["satisfied"] and s["text"].startswith("Aromi"), s
PY
    sed 's/"polarity": "positive"/"polarity": "glad"/' "$work/attr.json" > "$work/bad_polarity.json"
    err=$(cd "$work" && RUDDER_MODEL_PATH="$work" "$rudder" generate -q bad_polarity.json 2>&1 >/dev/null); code=$?
    [ $code -ne 0 ] || fail "an unknown polarity must fail"
    grep -q "/polarity: '.*denoiser-sentiment' has no class 'glad' (its classes: negative positive)" <<<"$err" || fail "$err"
    refused_recipe attr.json 's/"fields": \["food\[Italian\]"\]/"fields": []/' "/fields: expected a non-empty array of fields"
    python3 - "$work/sentiment.json" "$work/bad_attribute.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["data"]["attribute"]["classes"] = {"negative": ["low"], "positive": ["low"]}
json.dump(c, open(sys.argv[2], "w"))
PY
    err=$("$rudder" train-controller "$work/bad_attribute.json" 2>&1); code=$?
    [ $code -eq 2 ] || fail "expected exit 2, got $code: $err"
    grep -q '/data/attribute/classes/positive: the value "low" is in two classes' <<<"$err" || fail "$err"
    # `rudder eval`: each kind of target, a composition and infilling.
    attribute='"attribute": {"field": "customer rating", "classes": {"negative": ["low", "1 out of 5"], "positive": ["high", "5 out of 5"]}}'
    cat > "$work/one.json" <<'JSON'
{ "model": "denoiser", "sampler": {"steps": 14}, "seed": 2, "max_length": 14,
  "controllers": [ {"plugin": "span", "params": {"prefix": "Aromi"}} ] }
JSON
    cat > "$work/suite.json" <<JSON
{ "teacher": "model", "targets": {"file": "rated.csv", "count": 4, "seed": 3, $attribute},
  "tasks": [ {"name": "sentiment", "recipe": "attr.json", "control": "sentiment", "target": "sentiment"},
             {"name": "semantic", "recipe": "attr.json", "control": "semantic", "target": "fields"},
             {"name": "composed", "recipe": "attr.json",
              "controls": {"length": "length", "sentiment": "sentiment", "span": "prefix"}},
             {"name": "composed, overridden", "recipe": "attr.json",
              "controls": {"length": "length", "sentiment": "sentiment", "span": "prefix"},
              "params": {"span": {"prefix": "Zizzi"}}, "weight": {"sentiment": 0}},
             {"name": "infill", "recipe": "one.json", "control": "span", "target": "infill"} ] }
JSON
    out=$(cd "$work" && RUDDER_MODEL_PATH="$work" "$rudder" eval -q suite.json -o results) || fail "eval exit $?"
    grep -q "^| composed | discrete | 4 | .*\*\*all: [0-9.]*%\*\* | [0-9.]* | [0-9.]* | [0-9.]* |$" <<<"$out" || fail "$out"
    grep -q "^| infill | discrete | 4 | span: 100.0% / 1.000; BLEU-4 of the middle: [0-9.]* |" <<<"$out" || fail "$out"
    python3 - "$work/results" <<'PY' || fail "eval results: $(cat "$work/results/results.json")"
import json, os, sys
d = sys.argv[1]
tasks = {t["task"]: t for t in json.load(open(os.path.join(d, "results.json")))["tasks"]}
assert tasks["composed"]["all_satisfied"] is not None and tasks["infill"]["all_satisfied"] is None, tasks
assert 0 <= tasks["infill"]["bleu"] <= 1 and tasks["sentiment"]["bleu"] is None, tasks
def samples(name):
    return [json.loads(l) for l in open(os.path.join(d, "samples", name + ".jsonl"))]
rating = {"low": "negative", "1 out of 5": "negative", "high": "positive", "5 out of 5": "positive"}
for s in samples("sentiment"):
    ref = s["target"]["reference"]
    want = "negative" if ("low" in ref or "1 out of 5" in ref) else "positive"
    assert s["target"]["params"]["sentiment"]["polarity"] == want, s
for s in samples("semantic"):
    (field,) = s["target"]["params"]["semantic"]["fields"]
    assert not field.startswith("name["), s
for s in samples("composed"):
    p = s["target"]["params"]
    ref_tokens = s["target"]["reference"].split()
    assert p["length"]["tokens"] == len(ref_tokens) and p["span"]["prefix"] == " ".join(ref_tokens[:3]), s
    assert s["controls"]["length"]["satisfied"] and s["controls"]["span"]["satisfied"], s
# A composition's per-control params go to their controller after the target's: the prefix is the task's.
overridden = samples("composed--overridden")
assert len(overridden) == 4 and all(s["text"].startswith("Zizzi") for s in overridden), overridden
assert not all(s["target"]["reference"].startswith("Zizzi") for s in overridden), "the targets say Zizzi themselves"
for s in samples("infill"):
    p = s["target"]["params"]["span"]
    ref_tokens = s["target"]["reference"].split()
    n, side = len(ref_tokens), len(ref_tokens) // 3
    assert p["length"] == n and p["prefix"] == " ".join(ref_tokens[:side]) and p["suffix"] == " ".join(ref_tokens[n - side:]), s
    # The text starts with the prefix (compared as text: the detokeniser joins punctuation to the word before it).
    assert s["target"]["middle"] == [side, n - side] and s["text"].startswith(" ".join(ref_tokens[:side])), s
PY
    python3 - "$work/suite.json" "$work/bad_suite.json" <<'PY'
import json, sys
suite = json.load(open(sys.argv[1]))
del suite["targets"]["attribute"]
suite["tasks"][1].update({"params": {"x": {"y": 1}, "a": 2}, "weight": {"a": -1}, "controls": {"a": "pos", "b": "bad"}})
json.dump(suite, open(sys.argv[2], "w"))
PY
    err=$(cd "$work" && "$rudder" eval bad_suite.json 2>&1 >/dev/null); code=$?
    [ $code -eq 2 ] || fail "expected exit 2, got $code: $err"
    for want in '/tasks/1/controls: give "controls" or "control" and "target", not both' \
                '/tasks/1/params/x: not one of the task'"'"'s "controls"' '/tasks/1/params/a: expected an object' \
                '/tasks/1/weight/a: expected a number in [0, 1e+06], got -1' '/tasks/1/controls/b: expected one of' \
                '/tasks/0/targets: a sentiment target needs /targets/attribute' '/tasks/2/targets: a sentiment target needs'; do
      grep -qF "$want" <<<"$err" || fail "missing '$want' in: $err"
    done
    for unwanted in "unknown key 'control'" "unknown key 'target'"; do
      grep -qF "$unwanted" <<<"$err" && fail "'$unwanted' in: $err"
    done
    ;;
  convert_weights)
    # float16 storage: half the file, loaded into float32 parameters, the same perplexity to float16 rounding.
    train -q || fail "train exit $?"
    before=$(stat -c %s "$work/model/model.safetensors")
    ppl_before=$("$rudder" score "$work/train.csv" --teacher "$work/model" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["perplexity"])')
    out=$("$rudder" convert-weights "$work/model") || fail "convert exit $?"
    grep -q "model.safetensors: floating-point tensors stored as float16, [0-9]* KB -> [0-9]* KB" <<<"$out" || fail "$out"
    after=$(stat -c %s "$work/model/model.safetensors")
    [ "$after" -lt $((before * 6 / 10)) ] || fail "float16 file is $after bytes, float32 was $before"
    ppl_after=$("$rudder" score "$work/train.csv" --teacher "$work/model" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["perplexity"])')
    python3 -c "import sys; a, b = map(float, sys.argv[1:]); assert abs(a - b) < 0.01 * a, (a, b)" "$ppl_before" "$ppl_after" \
      || fail "perplexity $ppl_before -> $ppl_after"
    err=$("$rudder" convert-weights "$work/model" --dtype int8 2>&1); code=$?
    [ $code -eq 2 ] || fail "expected exit 2, got $code: $err"
    # A Hugging Face folder's config says the new storage type (torch_dtype), its keys in their order.
    mkdir "$work/hub" && cp "$work/model/model.safetensors" "$work/hub/"
    printf '{"model_type": "mdlm", "vocab_size": 9, "torch_dtype": "float16"}\n' > "$work/hub/config.json"
    out=$("$rudder" convert-weights "$work/hub" --dtype bfloat16) || fail "convert exit $?"
    grep -q "config.json: torch_dtype bfloat16" <<<"$out" || fail "$out"
    python3 -c 'import json,sys; c = json.load(open(sys.argv[1])); assert list(c) == ["model_type", "vocab_size", "torch_dtype"] and c["torch_dtype"] == "bfloat16", c' \
      "$work/hub/config.json" || fail "config: $(cat "$work/hub/config.json")"
    # Issue 64: values float16 cannot hold (past 65,504) became inf, the file was rewritten in place and the command
    # exited 0. Now refused with nothing written; --clamp stores them as the largest, --out keeps the original.
    mkdir "$work/big"
    printf '{"model_type": "mdlm", "vocab_size": 9}\n' > "$work/big/config.json"
    python3 - "$work/big/model.safetensors" <<'PY'
import json, struct, sys
values = [1.0, 70000.0, -1e6, float("inf")]
header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
header += b" " * ((8 - len(header) % 8) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(header)) + header + struct.pack("<4f", *values))
PY
    sum_before=$(sha256sum < "$work/big/model.safetensors")
    err=$("$rudder" convert-weights "$work/big" 2>&1); code=$?
    [ $code -ne 0 ] || fail "values past float16's range converted: $err"
    grep -q "tensor 'w' holds 2 value(s) beyond float16's largest, 65504.0" <<<"$err" || fail "$err"
    [ "$(sha256sum < "$work/big/model.safetensors")" = "$sum_before" ] || fail "the refused conversion changed the file"
    out=$("$rudder" convert-weights "$work/big" --clamp --out "$work/big/clamped.safetensors") || fail "clamp exit $?"
    grep -q "2 value(s) clamped" <<<"$out" || fail "$out"
    [ "$(sha256sum < "$work/big/model.safetensors")" = "$sum_before" ] || fail "--out changed the original"
    python3 - "$work/big/clamped.safetensors" <<'PY' || fail "clamped values"
import json, math, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
entry = json.loads(data[8:8 + n])["w"]
assert entry["dtype"] == "F16", entry
values = struct.unpack("<4e", data[8 + n:8 + n + 8])
assert values[:3] == (1.0, 65504.0, -65504.0) and math.isinf(values[3]), values
PY
    ;;
  *) fail "unknown case $case" ;;
esac
echo "ok: $case"
