"""Random-weight public checkpoints with real tokenizers, for validity_test.py's `checkpoints` case: MDLM and SEDD with
GPT-2's tokenizer (a JSON Schema), a Dream-shaped model with Qwen2.5's (a JSON Schema; the tokenizer with Dream's two
added tokens), UDLM with BERT's WordPiece (a pattern; uniform noise). Weights from tests/nets' fixture writers, the
tokenizers from the fixture text.bpe.fetch_reference (npm). Random weights make the constraint do all the work."""
import http.client
import json
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tests" / "nets"))


def skip(why):
    print("skipped:", why)
    raise SystemExit(77)


try:
    import jsonschema
except ImportError:
    skip("python3-jsonschema is not installed (scripts/install-deps.sh installs it)")
try:
    import torch
    import dit_checkpoint_fixture as dit
    import bidirectional_llm_fixture as llm
except (ImportError, SystemExit):
    skip("python3-torch is not installed")

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                           "member": {"type": "boolean"}},
          "required": ["name", "age"], "additionalProperties": False}


def valid_person(text):
    try:
        jsonschema.validate(json.loads(text), PERSON)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def mdlm_config(vocab):
    return {"architectures": ["MDLM"], "cond_dim": dit.TINY["cond"], "dropout": 0.1, "hidden_dim": dit.TINY["hidden"],
            "model_length": 48, "model_type": "mdlm", "n_blocks": dit.TINY["blocks"], "n_heads": dit.TINY["heads"],
            "return_dict": False, "time_conditioning": False, "torch_dtype": "float32",
            "transformers_version": "4.38.2", "vocab_size": vocab}


def sedd_config(tokens):
    return {"tokens": tokens, "graph": {"type": "absorb"}, "noise": {"type": "loglinear"},
            "model": {"name": "small", "type": "ddit", "hidden_size": dit.TINY["hidden"], "cond_dim": dit.TINY["cond"],
                      "length": 48, "n_blocks": dit.TINY["blocks"], "n_heads": dit.TINY["heads"],
                      "scale_by_sigma": True, "dropout": 0.1}}


def make(folder, references):
    gen = torch.Generator().manual_seed(29)
    gpt2 = references / "gpt2"
    made = {}
    w = dit.random_weights("backbone.", 50258, gen)
    dit.write_model(folder, "mdlm_gpt2", mdlm_config(50258), w)
    w = dit.random_weights("", 50258, gen)
    dit.write_model(folder, "sedd_gpt2", sedd_config(50257), w)
    for name in ("mdlm_gpt2", "sedd_gpt2"):
        for file in ("vocab.json", "merges.txt"):
            shutil.copy(gpt2 / file, pathlib.Path(folder) / name / file)
        made[name] = "json"
    # Dream's tokenizer is Qwen2.5's with <|beginoftext|> (151665) and <|mask|> (151666) added; its network has 151,936
    # rows.
    qwen = json.loads((references / "qwen2_5" / "tokenizer.json").read_text())
    for i, text in ((151665, "<|beginoftext|>"), (151666, "<|mask|>")):
        qwen["added_tokens"].append({"id": i, "content": text, "single_word": False, "lstrip": False,
                                     "rstrip": False, "normalized": False, "special": True})
    size = dict(llm.TINY, hidden=32, heads=2, kv_heads=1, intermediate=48, layers=1, length=64)
    config = llm.dream_config()
    config.update(vocab_size=151936, mask_token_id=151666, eos_token_id=151643, bos_token_id=151643,
                  pad_token_id=151643, max_position_embeddings=64, hidden_size=32, num_attention_heads=2,
                  num_key_value_heads=1, intermediate_size=48, num_hidden_layers=1, max_window_layers=1)
    llm.write_model(folder, "dream_qwen", config, llm.random_weights("dream", size, 151936, gen))
    (pathlib.Path(folder) / "dream_qwen" / "tokenizer.json").write_text(json.dumps(qwen))
    made["dream_qwen"] = "json"
    # UDLM with bert-base-uncased's WordPiece vocabulary (30,522 tokens).
    udlm = {"architectures": ["UDLM"], "model_type": "udlm", "time_conditioning": True, "cfg": False,
            "cfg_num_classes": -1, "return_dict": False, "torch_dtype": "float32", "transformers_version": "4.49.0",
            "dropout": 0.1, "cond_dim": dit.TINY["cond"], "hidden_dim": dit.TINY["hidden"], "model_length": 48,
            "n_blocks": dit.TINY["blocks"], "n_heads": dit.TINY["heads"], "vocab_size": 30522}
    dit.write_model(folder, "udlm_bert", udlm, dit.random_weights("backbone.", 30522, gen))
    shutil.copy(references / "bert_base_uncased" / "vocab.txt", pathlib.Path(folder) / "udlm_bert" / "vocab.txt")
    made["udlm_bert"] = "pattern"
    return made


def run(rudder, build, folder, generate, check, seeds=(5,), samples=4):
    references = pathlib.Path(build) / "tests" / "bpe_reference"
    for need in ("gpt2/vocab.json", "qwen2_5/tokenizer.json", "bert_base_uncased/vocab.txt"):
        if not (references / need).exists():
            skip(f"no {references / need}: the fixture text.bpe.fetch_reference needs node and npm")
    made = make(folder, references)
    pattern = r"[a-z]+( [a-z]+){1,4}\."
    samplers = {"analytic_few_steps": {"name": "analytic", "steps": 8},
                "confidence_blocks": {"name": "confidence", "steps": 8, "block_length": 16},
                "first_hitting": {"name": "first_hitting"},
                "remasking": {"name": "analytic", "steps": 12, "remask": {"strategy": "rescale", "eta": 0.5}}}
    compiled = re.compile(pattern)
    for model, kind in made.items():
        chosen = {"uniform_analytic": {"name": "analytic", "steps": 8}, "uniform_euler": {"name": "euler", "steps": 8}} \
            if model == "udlm_bert" else samplers
        if kind == "json":
            controller, valid = {"plugin": "json_schema", "params": {"schema": PERSON}}, valid_person
        else:
            controller, valid = {"plugin": "regex", "params": {"pattern": pattern}}, \
                (lambda t: compiled.fullmatch(t) is not None)
        for label, sampler in chosen.items():
            for seed in seeds:
                recipe = {"model": str(pathlib.Path(folder) / model), "sampler": sampler, "seed": seed,
                          "samples": samples, "batch_size": 2, "max_length": 48, "controllers": [controller]}
                check(generate(recipe, folder, f"{model}_{label}"), f"{model} {label} seed {seed}", valid,
                      controller["plugin"])
        if kind == "json":
            # Spaced as Python's json.dumps writes it (one space after ':' and ','), or at most one space there.
            for whitespace, spaced in (("space_after_separators", True), ("optional_space", False)):
                params = {"schema": PERSON, "whitespace": whitespace}
                recipe = {"model": str(pathlib.Path(folder) / model), "sampler": samplers["analytic_few_steps"],
                          "seed": 3, "samples": samples, "batch_size": 2, "max_length": 48,
                          "controllers": [{"plugin": "json_schema", "params": params}]}
                dumps = (lambda t: valid_person(t) and t == json.dumps(json.loads(t), ensure_ascii=False)) \
                    if spaced else valid_person
                check(generate(recipe, folder, f"{model}_{whitespace}"), f"{model} whitespace {whitespace}", dumps,
                      "json_schema")
    served(rudder, folder, made, check)
    served_budgets(rudder, folder)


def served(rudder, folder, made, check):
    """OpenAI's response_format through rudder serve, on the MDLM checkpoint: the samples validate."""
    recipe = pathlib.Path(folder) / "served.json"
    recipe.write_text(json.dumps({"model": "mdlm_gpt2", "max_length": 48, "sampler": {"name": "analytic", "steps": 8},
                                  "seed": 9}))
    model = pathlib.Path(folder) / "mdlm_gpt2"
    proc = subprocess.Popen([rudder, "serve", "--port", "0", "--threads", "1", "--model", f"mdlm_gpt2={model}",
                             "--recipe", f"person={recipe}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        if "listening on http://127.0.0.1:" not in line:
            raise SystemExit("FAIL served: no listening line: " + line + proc.stderr.read())
        port = int(line.split("127.0.0.1:")[1].split()[0])
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        c.request("POST", "/v1/generate", body=json.dumps({
            "recipe": "person", "samples": 4,
            "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}}))
        r = c.getresponse()
        body = json.loads(r.read().decode())
        if r.status != 200:
            raise SystemExit(f"FAIL served: {r.status}: {body}")
        check(body["samples"], "served mdlm_gpt2 response_format", valid_person, "json_schema")
        # The properties come in the schema's order (name, age, member), which is not the alphabetical one.
        for sample in body["samples"]:
            keys = list(json.loads(sample["text"]).keys())
            if keys != [k for k in PERSON["properties"] if k in keys]:
                raise SystemExit(f"FAIL served: properties out of the schema's order: {sample['text']}")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def served_budgets(rudder, folder):
    """Issue 64: 300-byte schemas (a string of maxLength up to 5000 beside a number within +-1e300) as response_format
    on the GPT-2 checkpoint. Read token by token over 48 positions each wanted gigabytes, allocated before
    --max-memory saw them, and the generator cache kept ~2 GB per schema; now each is refused within the time limit,
    at max_table_bytes, and the server's memory comes back to within 10% of its level before them."""
    import time
    recipe = pathlib.Path(folder) / "budgets.json"
    recipe.write_text(json.dumps({"model": "mdlm_gpt2", "max_length": 48, "sampler": {"name": "analytic", "steps": 4},
                                  "seed": 9}))
    model = pathlib.Path(folder) / "mdlm_gpt2"
    proc = subprocess.Popen([rudder, "serve", "--port", "0", "--threads", "1", "--model", f"mdlm_gpt2={model}",
                             "--recipe", f"wide={recipe}", "--max-memory", "2500", "--timeout", "60"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def resident_mb():
        status = pathlib.Path(f"/proc/{proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) // 1024

    try:
        line = proc.stderr.readline()
        if "listening on http://127.0.0.1:" not in line:
            raise SystemExit("FAIL served budgets: no listening line: " + line)
        port = int(line.split("127.0.0.1:")[1].split()[0])

        def post(body):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            c.request("POST", "/v1/generate", body=json.dumps(body))
            r = c.getresponse()
            return r.status, r.read().decode()

        status, text = post({"recipe": "wide", "samples": 1})
        if status != 200:
            raise SystemExit(f"FAIL served budgets: a plain request: {status}: {text}")
        time.sleep(3)
        before = resident_mb()
        for length in (5000, 4000, 3000, 2000):
            schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": length},
                                                       "n": {"type": "number", "minimum": -1e300, "maximum": 1e300}}}
            status, text = post({"recipe": "wide", "samples": 1, "response_format": {
                "type": "json_schema", "json_schema": {"name": "wide", "schema": schema}}})
            if status != 400 or "max_table_bytes" not in text:
                raise SystemExit(f"FAIL served budgets: maxLength {length}: {status}: {text[:400]}")
        time.sleep(8)  # the server gives freed memory back once it is idle
        after = resident_mb()
        if after > before * 1.1:
            raise SystemExit(f"FAIL served budgets: resident {after} MB after the schemas, {before} MB before")
        print(f"ok served budgets: 4 wide schemas refused at max_table_bytes; resident {before} MB before, {after} after")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
