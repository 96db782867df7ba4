#!/usr/bin/python3
"""Plain PyTorch (eager) reimplementation of Rudder's reverse loop for the two bundled models.

It is the yardstick for Rudder's speed: the same algorithm, the same weights, the same ATen calls a researcher
would write, one op at a time from Python. Given the same recipe and seed it reproduces `rudder generate`'s
samples token for token, which is how we know it runs the same algorithm (and not a cheaper one).

    /usr/bin/python3 bench/eager_reference.py --recipe examples/recipes/length_span_discrete.json \
        --samples 16 --batch-size 16 --threads 1 -o out.jsonl

Supported: models e2e-discrete (sampler "analytic") and e2e-continuous (sampler "ddpm", x0 "clamp"), the
controllers "length" {"tokens"} and "span" {"prefix"}. Anything else is refused.
It needs the torch that Rudder links (Debian's 1.13, /usr/bin/python3): the random streams and kernels must be
the same ones for the samples to match.
"""
import argparse
import ctypes
import json
import math
import mmap
import struct
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
IMPOSSIBLE = -1e4  # Rudder's kImpossibleLogProb: finite, so a later log_softmax never meets inf - inf
NEG_INF = float("-inf")


def fail(message):
    sys.exit(f"eager_reference: {message}")


# ---------------------------------------------------------------------------------------------------------------
# Model files


def load_safetensors(path):
    """name -> float32 tensor, each in memory of its own (as load_state_dict leaves a model's parameters). Weights
    may be stored as float16 or bfloat16; Rudder widens them to float32 on load."""
    with open(path, "rb") as f:  # mapped copy-on-write: writable, so torch.frombuffer does not warn
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}
    base = 8 + header_len
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype = dtypes[entry["dtype"]]
        count = (end - begin) // torch.tensor([], dtype=dtype).element_size()
        t = torch.frombuffer(data, dtype=dtype, count=count, offset=base + begin).reshape(entry["shape"])
        out[name] = t.to(torch.float32).clone()
    return out


def is_word_byte(c):
    return ord("0") <= c <= ord("9") or ord("a") <= c <= ord("z") or ord("A") <= c <= ord("Z") or c >= 0x80


class WordTokenizer:
    """Rudder's word tokenizer (host/text/src/tokenizer.cpp): vocab.txt one token a line, <pad> <unk> <mask> first."""

    PAD, UNK, MASK = 0, 1, 2

    def __init__(self, vocab_path):
        self.tokens = Path(vocab_path).read_text(encoding="utf-8").splitlines()
        self.index = {t: i for i, t in enumerate(self.tokens)}

    @staticmethod
    def split(text):
        b = text.encode("utf-8")
        out, i, n = [], 0, len(b)
        while i < n:
            c = b[i]
            if c in b" \t\n\r\f\v":
                i += 1
                continue
            if not is_word_byte(c):
                out.append(b[i : i + 1])
                i += 1
                continue
            end = i + 1  # a word: word bytes, plus ' or - between two word bytes
            while end < n:
                d = b[end]
                if is_word_byte(d):
                    end += 1
                elif d in b"'-" and end + 1 < n and is_word_byte(b[end + 1]):
                    end += 2
                else:
                    break
            out.append(b[i:end])
            i = end
        return [w.decode("utf-8") for w in out]

    def encode(self, text):
        return [self.index.get(w, self.UNK) for w in self.split(text)]

    def decode(self, ids):
        text, after_open = "", False
        for i in ids:
            if i == self.PAD:
                break
            word = self.tokens[i]
            attaches = word in (".", ",", ";", ":", "!", "?", ")", "'") or word.startswith("'")
            if text and not after_open and not attaches:
                text += " "
            text += word
            after_open = word == "("
        return text


# ---------------------------------------------------------------------------------------------------------------
# Networks (host/nn/src/transformer_trunk.cpp, denoiser_net.cpp)


class Trunk:
    """Pre-LayerNorm bidirectional transformer encoder. Unconditional runs only: no condition positions."""

    def __init__(self, w, cfg):
        self.w, self.heads, self.layers, self.dim = w, cfg["heads"], cfg["layers"], cfg["dim"]

    def block(self, x, p):
        w = self.w
        B, S, W = x.shape
        hd = W // self.heads
        h = F.layer_norm(x, (W,), w[p + "norm1.weight"], w[p + "norm1.bias"], 1e-5)
        qkv = F.linear(h, w[p + "qkv.weight"], w[p + "qkv.bias"]).view(B, S, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        # Contiguous q, k, v as Rudder takes them: the batched matmuls are faster on them than on strided views.
        q, k, v = qkv[0].contiguous(), qkv[1].contiguous(), qkv[2].contiguous()
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        attended = torch.matmul(torch.softmax(scores, -1), v).transpose(1, 2).reshape(B, S, W)
        h = x + F.linear(attended, w[p + "proj.weight"], w[p + "proj.bias"])
        ff = F.layer_norm(h, (W,), w[p + "norm2.weight"], w[p + "norm2.bias"], 1e-5)
        ff = F.linear(F.gelu(F.linear(ff, w[p + "ff1.weight"], w[p + "ff1.bias"])), w[p + "ff2.weight"], w[p + "ff2.bias"])
        return h + ff

    def __call__(self, h):
        L = h.shape[1]
        x = h + self.w["trunk.position"][:L]
        for i in range(self.layers):
            x = self.block(x, f"trunk.blocks.{i}.")
        return F.layer_norm(x, (self.dim,), self.w["trunk.final_norm.weight"], self.w["trunk.final_norm.bias"], 1e-5)


def time_sinusoid(t, dim):
    half = dim // 2
    freqs = torch.exp(torch.arange(half, dtype=torch.float32) * (-math.log(10000.0) / half))
    args = (t * 1000.0).unsqueeze(1) * freqs.unsqueeze(0)  # improved-diffusion's rescaled timesteps
    return torch.cat([torch.cos(args), torch.sin(args)], 1)


class DiscreteNet:
    """MDLM's SUBS parameterisation: log p(x0 | x_t), mask impossible, unmasked positions certain of their token."""

    def __init__(self, w, cfg):
        self.w, self.trunk = w, Trunk(w, cfg)
        # The mask token's -inf lives in the head's bias (SUBS: the clean token is never the mask).
        self.head_bias = w["head.bias"].index_fill(0, torch.tensor([WordTokenizer.MASK]), NEG_INF)

    def log_probs(self, tokens):
        hidden = self.trunk(F.embedding(tokens, self.w["token_embedding"]))
        logp = torch.log_softmax(F.linear(hidden, self.w["head.weight"], self.head_bias), -1).clamp_min(IMPOSSIBLE)
        committed = torch.full_like(logp, IMPOSSIBLE).scatter_(-1, tokens.unsqueeze(-1), 0.0)
        return torch.where(tokens.eq(WordTokenizer.MASK).unsqueeze(-1), logp, committed)


class ContinuousNet:
    """Diffusion-LM, x0-parameterisation; the rounding head is tied to the embedding table E."""

    def __init__(self, w, cfg):
        self.w, self.trunk, self.dim = w, Trunk(w, cfg), cfg["dim"]
        self.E = w["embedding"]

    def predict_x0(self, x_t, t):
        w = self.w
        times = torch.full((x_t.shape[0],), t, dtype=torch.float32)
        time = time_sinusoid(times, self.dim)
        time = F.linear(F.silu(F.linear(time, w["time_mlp1.weight"], w["time_mlp1.bias"])), w["time_mlp2.weight"], w["time_mlp2.bias"])
        h = F.linear(x_t, w["input_proj.weight"], w["input_proj.bias"]) + time.unsqueeze(1)
        return F.linear(self.trunk(h), w["output_proj.weight"], w["output_proj.bias"])


# ---------------------------------------------------------------------------------------------------------------
# Schedules (host/nn/src/schedule.cpp), in double precision as Rudder computes them


def sqrt_alpha_bar(T, s=1e-4, max_beta=0.999):
    f = lambda t: 1.0 - math.sqrt(t + s)  # Diffusion-LM's "sqrt" schedule
    ab = [1.0]
    for k in range(1, T + 1):
        beta = min(1.0 - f(k / T) / f((k - 1) / T), max_beta)
        ab.append(ab[-1] * (1.0 - beta))
    return ab


def respaced_timesteps(T, steps):
    # T - round(i (T-1) / (steps-1)) in integers, as Rudder's ContinuousSampler: strictly decreasing, ends at 1.
    return [T - (0 if steps == 1 else (2 * i * (T - 1) + (steps - 1)) // (2 * (steps - 1))) for i in range(steps)]


# ---------------------------------------------------------------------------------------------------------------
# Hard constraints (controllers/length, controllers/span) and their composition (host/runtime/src/composer.cpp)


def constraints(controllers, tokenizer, B, L, V):
    """(fixed int64 [B, L] with -1 where free, forbidden bool [B, L, V]); either None when nobody set it.
    The controllers give the same constraints at every step, so they are built once."""
    fixed = forbidden = None
    for c in controllers:
        params = c.get("params", {})
        if c["plugin"] == "length":
            n = params["tokens"]
            if n > L:
                fail(f"length {n} does not fit max_length {L}")
            # Exactly n content tokens: pad forbidden before n, fixed from n on.
            if forbidden is None:
                forbidden = torch.zeros(B, L, V, dtype=torch.bool)
            forbidden[:, :n, tokenizer.PAD] = True
            fixed = torch.full((B, L), -1, dtype=torch.long) if fixed is None else fixed
            fixed[:, n:] = tokenizer.PAD
        elif c["plugin"] == "span":
            ids = tokenizer.encode(params["prefix"])
            if not ids or tokenizer.UNK in ids or len(ids) > L:
                fail(f"span prefix {params['prefix']!r} has no tokens, an unknown word, or does not fit")
            fixed = torch.full((B, L), -1, dtype=torch.long) if fixed is None else fixed
            if (fixed[:, : len(ids)].ge(0) & fixed[:, : len(ids)].ne(torch.tensor(ids))).any():
                fail("controllers fix different tokens at one position")
            fixed[:, : len(ids)] = torch.tensor(ids)
    if fixed is not None and forbidden is not None:
        if forbidden.gather(-1, fixed.clamp_min(0).unsqueeze(-1)).squeeze(-1).logical_and(fixed.ge(0)).any():
            fail("a fixed token is forbidden")
    return fixed, forbidden


def apply_constraints(logp, fixed, forbidden, never_id):
    """Composer::apply: forbidden tokens and the mask token get -inf, fixed positions become one-hot; renormalised."""
    x = logp.clone()
    x[..., never_id] = NEG_INF
    if forbidden is not None:
        x.masked_fill_(forbidden, NEG_INF)
    if fixed is not None:
        onehot = torch.full_like(x, NEG_INF).scatter_(-1, fixed.clamp_min(0).unsqueeze(-1), 0.0)
        x = torch.where(fixed.ge(0).unsqueeze(-1), onehot, x)
    return torch.log_softmax(x, -1)


def with_temperature(logp, temperature):
    return logp if temperature == 1.0 else torch.log_softmax(logp / temperature, -1)


# ---------------------------------------------------------------------------------------------------------------
# Reverse loops (host/runtime/src/generator.cpp, sampler.cpp)
#
# Every random number comes from one CPU generator seeded with the recipe's seed, in Rudder's order and shapes:
# torch.Generator is the same mt19937 as LibTorch's CPUGeneratorImpl, so the draws are the same numbers.


def run_discrete(net, batch, L, V, s, fixed, forbidden, gen):
    """MDLM's analytic sampler with its cache: the network runs only when some token changed."""
    MASK, steps, eps = WordTokenizer.MASK, s["steps"], s["mask_eps"]
    tokens = torch.full((batch, L), MASK, dtype=torch.long)
    logp, stale = None, True
    for i in range(steps):
        t = 1.0 - i / steps
        if stale:
            # Rudder's loop renormalises the denoiser's output once more; kept, since it changes the last bits.
            logp, stale = torch.log_softmax(net.log_probs(tokens), -1), False
        if fixed is not None:
            # Fixed tokens are committed at once, and the network sees them before this step samples.
            is_fixed = fixed.ge(0)
            if is_fixed.logical_and(tokens.ne(fixed)).any():
                tokens = torch.where(is_fixed, fixed, tokens)
                logp = torch.log_softmax(net.log_probs(tokens), -1)
        adjusted = with_temperature(apply_constraints(logp, fixed, forbidden, MASK), s["temperature"])

        # Unmask each masked position with probability (m(t) - m(s)) / m(t), m(t) = (1 - eps) t; all at the end.
        if i + 1 == steps:
            p = 1.0
        else:
            m_t, m_s = (1.0 - eps) * t, (1.0 - eps) * (1.0 - (i + 1) / steps)
            p = (m_t - m_s) / m_t
        u = torch.rand(batch, L, generator=gen)
        unmask = tokens.eq(MASK).logical_and(u.lt(p))
        # Gumbel-max sample of softmax(adjusted); both draws happen every step, as in Rudder.
        uniform = torch.rand(batch, L, V, generator=gen).clamp_min(1e-20)
        scores = adjusted + uniform.log().neg().log().neg()
        scores[..., MASK] = NEG_INF
        nxt = torch.where(unmask, scores.argmax(2), tokens)
        if not nxt.equal(tokens):
            stale = True
        tokens = nxt
    return tokens


def run_continuous(net, batch, L, V, s, fixed, forbidden, gen):
    """Diffusion-LM's DDPM reverse process on respaced steps, x0 clamped to the nearest token's embedding."""
    E, MASK, T, steps = net.E, WordTokenizer.MASK, s["T"], s["steps"]
    ab, ks = s["alpha_bar"], respaced_timesteps(s["T"], s["steps"])
    x = torch.randn(batch, L, E.shape[1], generator=gen)
    fixed_mask = None if fixed is None else fixed.ge(0).unsqueeze(-1)
    for i in range(steps):
        k, k_next = ks[i], (ks[i + 1] if i + 1 < steps else 0)
        x0 = net.predict_x0(x, k / T)
        # log_softmax twice: once in the denoiser (its logits), once in the loop, as Rudder does.
        logp = torch.log_softmax(torch.log_softmax(torch.matmul(x0, E.t()), -1), -1)
        adjusted = with_temperature(apply_constraints(logp, fixed, forbidden, MASK), s["temperature"])
        x0_hat = F.embedding(adjusted.argmax(-1), E)
        if fixed is not None:
            x0_hat = torch.where(fixed_mask, F.embedding(fixed.clamp_min(0), E), x0_hat)

        # q(x_{k'} | x_k, x0) for the respaced pair (k' = k_next): beta is the effective one-step beta.
        beta = 1.0 - ab[k] / ab[k_next]
        c0 = math.sqrt(ab[k_next]) * beta / (1.0 - ab[k])
        ck = math.sqrt(1.0 - beta) * (1.0 - ab[k_next]) / (1.0 - ab[k])
        mean = c0 * x0_hat + ck * x
        sigma = 0.0 if k_next == 0 else math.sqrt(max(beta * (1.0 - ab[k_next]) / (1.0 - ab[k]), 0.0))
        if sigma > 0.0 and s["noise_scale"] > 0.0:
            x = mean + s["noise_scale"] * sigma * torch.randn(x.shape, generator=gen)
        else:
            x = mean
        if fixed is not None and i + 1 < steps:
            # Infilling as Diffusion-LM does it: fixed positions carry their token's embedding, noised to the
            # next step's level.
            a = ab[ks[i + 1]]
            e = F.embedding(fixed.clamp_min(0), E)
            noised = math.sqrt(a) * e + math.sqrt(1.0 - a) * torch.randn(e.shape, generator=gen)
            x = torch.where(fixed_mask, noised, x)
    # Round to the nearest embedding, within the hard constraints.
    dist = x.pow(2).sum(-1, keepdim=True) - 2 * torch.matmul(x, E.t()) + E.pow(2).sum(-1)
    return apply_constraints(torch.log_softmax(-dist, -1), fixed, forbidden, MASK).argmax(-1)


# ---------------------------------------------------------------------------------------------------------------
# Recipe


def check_keys(obj, allowed, where):
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        fail(f"{where}: {', '.join(unknown)} not supported by this reference (it supports {', '.join(sorted(allowed))})")


def read_recipe(path, args):
    recipe = json.loads(Path(path).read_text())
    check_keys(recipe, {"model", "sampler", "seed", "samples", "batch_size", "controllers"}, "recipe")
    model = recipe["model"]
    model_dir = MODELS_DIR / model if (MODELS_DIR / model).is_dir() else Path(path).parent / model
    if not (model_dir / "config.json").is_file():
        fail(f"model '{model}' not found (looked in {MODELS_DIR} and next to the recipe)")
    config = json.loads((model_dir / "config.json").read_text())
    if config.get("type") != "transformer" or config.get("tokenizer", {}).get("type", "word") != "word":
        fail(f"model '{model}': only transformer denoisers with the word tokenizer are implemented")
    family = config["network"]["family"]

    given = recipe.get("sampler", {})
    check_keys(given, {"name", "steps", "temperature", "x0", "noise_scale"}, "sampler")
    # A recipe that names no sampler takes the model's recommendation, its own keys over it (as Rudder does).
    sampler = dict(config.get("sampler", {}).get(family, {})) if "name" not in given else {}
    sampler.update(given)
    s = {"name": sampler.get("name", "ddim" if family == "continuous" else "analytic"),
         "steps": sampler.get("steps", 200), "temperature": float(sampler.get("temperature", 1.0)),
         "x0": sampler.get("x0", "interpolate"), "noise_scale": float(sampler.get("noise_scale", 1.0))}
    if family == "discrete" and s["name"] != "analytic":
        fail(f"sampler '{s['name']}': only 'analytic' is implemented for discrete models")
    if family == "continuous" and (s["name"] != "ddpm" or s["x0"] != "clamp"):
        fail(f"sampler '{s['name']}' with x0 '{s['x0']}': only ddpm with x0 'clamp' is implemented for continuous models")
    if family == "discrete":
        s["mask_eps"] = config.get("mask_schedule", {}).get("eps", 1e-3)
    else:
        sched = config["network"].get("schedule", {"name": "sqrt", "T": 2000})
        if sched.get("name", "sqrt") != "sqrt":
            fail(f"schedule '{sched['name']}': only 'sqrt' is implemented")
        s["T"] = sched.get("T", 2000)
        s["alpha_bar"] = sqrt_alpha_bar(s["T"])

    controllers = recipe.get("controllers", [])
    for n, c in enumerate(controllers):
        check_keys(c, {"plugin", "params"}, f"controllers/{n}")
        if c["plugin"] == "length":
            check_keys(c.get("params", {}), {"tokens"}, f"controllers/{n}/params")
        elif c["plugin"] == "span":
            check_keys(c.get("params", {}), {"prefix"}, f"controllers/{n}/params")
        else:
            fail(f"controllers/{n}: plugin '{c['plugin']}' has no eager counterpart here: the reference covers the length and span controllers only")

    seed = args.seed if args.seed is not None else recipe.get("seed", 0)
    samples = args.samples if args.samples is not None else recipe.get("samples", 1)
    batch_size = args.batch_size if args.batch_size is not None else recipe.get("batch_size", 16)
    return model_dir, config, family, s, controllers, seed, samples, batch_size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", required=True)
    ap.add_argument("--samples", type=int)
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args()

    # Same compute threads as `rudder --threads T`: LibTorch's pool, and OpenBLAS's (its OpenMP build here).
    torch.set_num_threads(args.threads)
    try:
        ctypes.CDLL("libopenblas.so.0").openblas_set_num_threads(args.threads)
    except (OSError, AttributeError):
        pass

    model_dir, config, family, s, controllers, seed, samples, batch_size = read_recipe(args.recipe, args)
    tokenizer = WordTokenizer(model_dir / config["tokenizer"].get("vocab", "vocab.txt"))
    weights = load_safetensors(model_dir / config["weights"])
    net = DiscreteNet(weights, config["network"]) if family == "discrete" else ContinuousNet(weights, config["network"])
    L, V = config["network"].get("max_length", 64), len(tokenizer.tokens)
    run = run_discrete if family == "discrete" else run_continuous

    gen = torch.Generator().manual_seed(seed)
    per_batch = min(batch_size, samples)
    rows = []
    start = time.perf_counter()
    with torch.no_grad():
        for b in range((samples + per_batch - 1) // per_batch):
            batch = min(per_batch, samples - b * per_batch)
            fixed, forbidden = constraints(controllers, tokenizer, batch, L, V)
            for i, row in enumerate(run(net, batch, L, V, s, fixed, forbidden, gen).tolist()):
                n = row.index(tokenizer.PAD) if tokenizer.PAD in row else len(row)
                rows.append({"index": b * per_batch + i, "text": tokenizer.decode(row[:n]), "tokens": row[:n]})
    elapsed = time.perf_counter() - start

    with open(args.out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"eager: {samples} samples in {elapsed:.2f} s")


if __name__ == "__main__":
    main()
