#!/usr/bin/python3
"""What LLaDA's generate() (ML-GSAI/LLaDA, generate.py; with Fast-dLLM's threshold and factor rules, NVlabs/Fast-dLLM)
and Dream's diffusion_generate() (Dream-org's generation_utils.py; with Fast-dLLM's block decoding) write for the
checkpoints bidirectional_llm_fixture.py makes, for tests/nets/bidirectional_llm_test.

Written here from the descriptions of those two functions (docs/checkpoints.md, "The authors' samplers") over the
fixture's float64 network, not taken from the authors' code; the note of issue 46 says how it was compared with the
authors' own functions. Randomness as theirs: torch.manual_seed(seed), then torch.rand in the order they call it.

usage: authors_samplers_reference.py CASES.json OUT.json
  CASES.json: [{"dir": checkpoint folder, "flavor": "llada" | "dream", "prompt": [ids], "seed": int,
                "sampler": {...the recipe's sampler object...}, "gen_length": int}, ...]
  OUT.json:   [[ids of the whole sequence], ...] in the same order
"""
import glob
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from bidirectional_llm_fixture import TINY, reference_logits  # noqa: E402

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def read_safetensors(path):
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return out


def load(folder):
    weights = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        weights.update(read_safetensors(path))
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        return weights, json.load(f)


def llada_cached(w, config, prompt, gen_length, steps, block_length, kv_cache):
    """Fast-dLLM's generate_with_prefix_cache / generate_with_dual_cache (temperature 0, low confidence): each
    block's first step runs every position and keeps the keys and values; its other steps run the block to the end
    of the sequence (prefix) or the block alone (dual)."""
    mask_id = config["mask_token_id"]
    P = len(prompt)
    x = torch.full((1, P + gen_length), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    block_length = block_length or gen_length
    blocks = gen_length // block_length
    per_block = steps // blocks
    cache = {}
    for b in range(blocks):
        lo, hi = P + b * block_length, P + (b + 1) * block_length
        m = int((x[0, lo:hi] == mask_id).sum())
        counts = [m // per_block + (1 if j < m % per_block else 0) for j in range(per_block)]
        for j in range(per_block):
            stop = x.shape[1] if kv_cache == "prefix" else hi
            if j == 0:
                logits = reference_logits("llada", w, config, x, cache=cache)[:, lo:hi]
            else:
                logits = reference_logits("llada", w, config, x, window=(lo, stop), cache=cache)[:, : hi - lo]
            drawn = logits.argmax(-1)[0]
            confidence = logits.softmax(-1)[0].gather(-1, drawn.unsqueeze(-1)).squeeze(-1)
            masked = x[0, lo:hi] == mask_id
            confidence = torch.where(masked, confidence, torch.tensor(float("-inf"), dtype=confidence.dtype))
            chosen = confidence.topk(counts[j]).indices
            x[0, lo + chosen] = drawn[chosen]
    return x[0].tolist()


def shift(logits):
    """Dream's: the prediction for position i comes from i - 1; the first keeps its own."""
    return torch.cat([logits[:, :1], logits[:, :-1]], 1)


def dream_blocks(w, config, prompt, gen_length, steps, eps, block_length, threshold, kv_cache, temperature, top_p,
                 top_k):
    """Fast-dLLM's Dream block decoding (its generation_utils_block.py _sample), temperature 0: per block, a full
    forward (keeping keys and values) whose draw at the block's first position is committed; then, over the block's
    window (the rest of the sequence: prefix; the block: dual; every position, no cache), shifted within it, steps on
    the block's own times with the entropy order, or the threshold rule with the drawn token's probability."""
    assert temperature == 0
    mask_id = config["mask_token_id"]
    P = len(prompt)
    L = P + gen_length
    x = torch.full((1, L), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    K = block_length or gen_length
    blocks = gen_length // K
    per_block = steps // blocks
    times = torch.linspace(1, eps, per_block + 1)
    cache = {}

    def block_logits(lo, hi):
        if kv_cache == "none":
            return reference_logits("dream", w, config, x)[:, lo:hi]
        stop = L if kv_cache == "prefix" else hi
        window = reference_logits("dream", w, config, x, shifted=False, window=(lo, stop), cache=cache)
        return shift(window)[:, : hi - lo]

    for b in range(blocks):
        lo, hi = P + b * K, P + (b + 1) * K
        first = reference_logits("dream", w, config, x, cache=cache)[0, lo]
        x[0, lo] = dream_shape(first[None], temperature, top_p, top_k).argmax(-1)[0]
        j = 1
        while (x[0, lo:hi] == mask_id).any():
            if threshold == 0 and j == per_block:
                break
            logits = block_logits(lo, hi)[0]
            masked = x[0, lo:hi] == mask_id
            p = dream_shape(logits[masked], temperature, top_p, top_k)
            confidence, drawn = p.max(-1)
            if threshold > 0:
                order = sorted(range(len(drawn)), key=lambda k: -float(confidence[k]))
                chosen = [order[0]] + [k for k in order[1:] if confidence[k] >= threshold]
            else:
                confidence = (p * (p + 1e-10).log()).sum(-1)
                share = 1 - times[j + 1] / times[j]
                m = masked.sum() / 1
                n = int(m * share) if j < per_block - 1 else int(m)
                chosen = sorted(range(len(drawn)), key=lambda k: -float(confidence[k]))[:n]
                j += 1
            where = masked.nonzero().squeeze(1)
            for k in chosen:
                x[0, lo + where[k]] = drawn[k]
    return x[0].tolist()


def parallel_count(confidence, rule, value):
    """Fast-dLLM: how many of the block's masked positions (their `confidence`, sorted or not) a step commits."""
    c = sorted(confidence, reverse=True)
    if rule == "threshold":  # the most confident, and every other reaching the threshold
        return 1 + sum(1 for x in c[1:] if x >= value)
    for n in range(1, len(c)):  # factor: stop at the first n-th (from 0) below 1 - factor / (n + 2) ...
        if c[n] < 1 - value / (n + 2):
            return len(c) if n == len(c) - 1 else n  # ... where a miss at the last still takes all
    return len(c)


def llada_parallel(network, mask_id, prompt, gen_length, block_length, temperature, rule, value):
    """Fast-dLLM's generate() without caches: each block until it is finished, committing by the rule."""
    P = len(prompt)
    x = torch.full((1, P + gen_length), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    block_length = block_length or gen_length
    for b in range(gen_length // block_length):
        lo, hi = P + b * block_length, P + (b + 1) * block_length
        while (x[0, lo:hi] == mask_id).any():
            logits = network(x)[0]
            assert temperature == 0
            drawn = logits.argmax(-1)
            p = logits.double().softmax(-1).gather(-1, drawn.unsqueeze(-1)).squeeze(-1)
            where = [i for i in range(lo, hi) if x[0, i] == mask_id]
            confidence = [float(p[i]) for i in where]
            n = parallel_count(confidence, rule, value)
            for i in sorted(where, key=lambda i: -float(p[i]))[:n]:
                x[0, i] = drawn[i]
    return x[0].tolist()


def llada(network, mask_id, prompt, gen_length, steps, block_length, temperature, remasking, cfg_scale):
    """LLaDA's generate(): blocks after the prompt, a precomputed number of commits per step, the most confident."""
    P = len(prompt)
    x = torch.full((1, P + gen_length), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    is_prompt = x != mask_id
    block_length = block_length or gen_length
    blocks = gen_length // block_length
    per_block = steps // blocks
    for b in range(blocks):
        lo, hi = P + b * block_length, P + (b + 1) * block_length
        m = int((x[0, lo:hi] == mask_id).sum())
        counts = [m // per_block + (1 if j < m % per_block else 0) for j in range(per_block)]
        for j in range(per_block):
            masked = x == mask_id
            logits = network(x)
            if cfg_scale > 0:
                unconditional = network(x.masked_fill(is_prompt, mask_id))
                logits = unconditional + (cfg_scale + 1) * (logits - unconditional)
            if temperature == 0:
                drawn = logits.argmax(-1)
            else:  # Gumbel-max at the temperature, float64, noise for every row of every position
                u = torch.rand(logits.shape, dtype=torch.float64)
                drawn = (logits.double().exp() / (-u.log()) ** temperature).argmax(-1)
            if remasking == "low_confidence":
                confidence = logits.softmax(-1).gather(-1, drawn.unsqueeze(-1)).squeeze(-1)
            else:
                confidence = torch.rand(x.shape).double()
            confidence[:, hi:] = float("-inf")
            confidence = torch.where(masked, confidence, torch.tensor(float("-inf"), dtype=confidence.dtype))
            drawn = torch.where(masked, drawn, x)
            chosen = confidence[0].topk(counts[j]).indices
            x[0, chosen] = drawn[0, chosen]
    return x[0].tolist()


def dream_shape(logits, temperature, top_p, top_k):
    if temperature > 0:
        logits = logits / temperature
    if top_p is not None and top_p < 1:
        ordered, order = logits.sort(-1, descending=True)
        p = ordered.softmax(-1)
        gone = (p.cumsum(-1) - p) > top_p  # the tokens above hold more than top_p
        logits = logits.masked_fill(torch.zeros_like(gone).scatter(-1, order, gone), float("-inf"))
    if top_k:
        kth = logits.topk(top_k, -1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits.softmax(-1)


def dream(network, mask_id, prompt, gen_length, steps, eps, alg, temperature, top_p, top_k):
    """Dream's diffusion_generate() with alg_temp 0 (origin, maskgit_plus, topk_margin, entropy)."""
    P = len(prompt)
    x = torch.full((1, P + gen_length), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    times = torch.linspace(1, eps, steps + 1)
    for i in range(steps):
        masked = x == mask_id
        rows = network(x)[masked]
        share = 1 - times[i + 1] / times[i]
        if alg == "origin":
            chosen = torch.rand(rows.shape[0]) < share if i < steps - 1 else torch.ones(rows.shape[0], dtype=torch.bool)
            drawn = torch.full((rows.shape[0],), mask_id, dtype=torch.long)
            if chosen.any():
                p = dream_shape(rows[chosen], temperature, top_p, top_k)
                assert temperature == 0
                drawn[chosen] = p.argmax(-1)
            x[masked] = drawn
            continue
        p = dream_shape(rows, temperature, top_p, top_k)
        assert temperature == 0
        confidence, drawn = p.max(-1)
        if alg == "topk_margin":
            top = p.topk(2, -1).values
            confidence = top[:, 0] - top[:, 1]
        elif alg == "entropy":
            confidence = (p * (p + 1e-10).log()).sum(-1)
        n = masked.sum() / 1  # float32, as Dream averages over the batch
        count = int(n * share) if i < steps - 1 else int(n)
        if count > 0:
            full = torch.full(x.shape, float("-inf"), dtype=confidence.dtype)
            full[masked] = confidence
            chosen = full[0].topk(count).indices
            proposal = torch.full(x.shape, mask_id, dtype=torch.long)
            proposal[masked] = drawn
            x[0, chosen] = proposal[0, chosen]
    return x[0].tolist()


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for case in cases:
        weights, config = load(case["dir"])
        TINY["length"] = 32
        flavor = case["flavor"]
        mask_id = config["mask_token_id"]

        def network(tokens):
            return reference_logits(flavor, weights, config, tokens)

        s = case["sampler"]
        torch.manual_seed(case["seed"])
        if flavor == "dream" and ("block_length" in s or "threshold" in s or "kv_cache" in s):
            out.append(dream_blocks(weights, config, case["prompt"], case["gen_length"], s["steps"],
                                    s.get("eps", 1e-3), s.get("block_length", 0), s.get("threshold", 0.0),
                                    s.get("kv_cache", "none"), s.get("temperature", 0.0), s.get("top_p"),
                                    s.get("top_k")))
        elif flavor == "llada" and s.get("kv_cache", "none") != "none":
            out.append(llada_cached(weights, config, case["prompt"], case["gen_length"], s["steps"],
                                    s.get("block_length", 0), s["kv_cache"]))
        elif flavor == "llada" and ("threshold" in s or "factor" in s):
            rule = "threshold" if "threshold" in s else "factor"
            out.append(llada_parallel(network, mask_id, case["prompt"], case["gen_length"], s.get("block_length", 0),
                                      s.get("temperature", 0.0), rule, s[rule]))
        elif flavor == "llada":
            out.append(llada(network, mask_id, case["prompt"], case["gen_length"], s["steps"], s.get("block_length", 0),
                             s.get("temperature", 0.0), s.get("remasking", "low_confidence"),
                             s.get("prompt_guidance", 0.0)))
        else:
            out.append(dream(network, mask_id, case["prompt"], case["gen_length"], s["steps"], s.get("eps", 1e-3),
                             s.get("alg", "origin"), s.get("temperature", 0.0), s.get("top_p"), s.get("top_k")))
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
