#!/usr/bin/python3
"""Writes tiny random-weight MDLM, SEDD, UDLM, DUO and BD3-LM checkpoints in the public checkpoints' Hugging Face layout,
and the reference outputs of the same network computed here in plain PyTorch (float64), for
tests/nets/dit_checkpoint_test.

The layout follows kuleshov-group/mdlm-owt (config.json of an MDLMConfig, tensors under "backbone."; UDLM's and
DUO's add their own config fields to it) and louaaron/sedd-small (config.json = SEDD's training config, tensors
without a prefix); the math follows the DiT
those repositories define (see host/nn/include/rudder/nn/dit_checkpoint.hpp). Written from that description, not
copied: the reference must be independent of the C++ it checks.

usage: dit_checkpoint_fixture.py OUT_DIR     exit 77 when PyTorch is missing (the test then skips)
       dit_checkpoint_fixture.py --real-size OUT_DIR
           an MDLM checkpoint of mdlm-owt's sizes (hidden 768, 12 blocks, 12 heads, cond 128, 1024 positions,
           vocabulary 50258; 680 MB), random weights, with reference.safetensors beside it (the raw output for one
           input of 16 positions) for bench/checkpoint_bench.cpp
"""
import json
import math
import os
import struct
import sys

try:
    import torch
except ImportError:
    print("python3-torch is not installed (scripts/install-deps.sh installs it)", file=sys.stderr)
    sys.exit(77)

TINY = dict(hidden=64, cond=32, blocks=2, heads=4, length=16, tokens=299)  # vocabulary 300 with the mask


def entry(value):
    """A weight as (shape, dtype, make): a tensor, or such a triple already, for one made only as it is written (a
    checkpoint of billions of parameters then holds one tensor in memory at a time)."""
    return (list(value.shape), value.dtype, lambda: value) if isinstance(value, torch.Tensor) else value


def nbytes(value):
    shape, dtype, _ = entry(value)
    return math.prod(shape) * torch.tensor([], dtype=dtype).element_size()


def save_safetensors(path, tensors):
    """safetensors by hand (python3-safetensors is not a dependency): header length, JSON header, raw data. Values are
    tensors or entry() triples, made in file order as they are written."""
    names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64"}
    header, offset = {}, 0
    for name, value in tensors.items():
        shape, dtype, _ = entry(value)
        header[name] = {"dtype": names[dtype], "shape": shape, "data_offsets": [offset, offset + nbytes(value)]}
        offset += nbytes(value)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, value in tensors.items():
            t = entry(value)[2]().contiguous()
            f.write(t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes())
            if not isinstance(value, torch.Tensor):  # made now: a long write, so say how far it is
                print(f"  {os.path.basename(path)}: {name}", file=sys.stderr, flush=True)


def random_weights(prefix, vocab, gen):
    h, c, n = TINY["hidden"], TINY["cond"], TINY["blocks"]
    head_dim = h // TINY["heads"]

    def rnd(*shape, scale=None):
        fan_in = shape[-1]
        return torch.randn(*shape, generator=gen) * (scale if scale is not None else 1 / math.sqrt(fan_in))

    w = {
        "vocab_embed.embedding": rnd(vocab, h, scale=1.0),
        "sigma_map.mlp.0.weight": rnd(c, 256),
        "sigma_map.mlp.0.bias": rnd(c, scale=0.1),
        "sigma_map.mlp.2.weight": rnd(c, c),
        "sigma_map.mlp.2.bias": rnd(c, scale=0.1),
        "rotary_emb.inv_freq": 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim)),
    }
    for i in range(n):
        b = f"blocks.{i}."
        w[b + "norm1.weight"] = 1 + rnd(h, scale=0.1)
        w[b + "attn_qkv.weight"] = rnd(3 * h, h)
        w[b + "attn_out.weight"] = rnd(h, h)
        w[b + "norm2.weight"] = 1 + rnd(h, scale=0.1)
        w[b + "mlp.0.weight"] = rnd(4 * h, h)
        w[b + "mlp.0.bias"] = rnd(4 * h, scale=0.1)
        w[b + "mlp.2.weight"] = rnd(h, 4 * h)
        w[b + "mlp.2.bias"] = rnd(h, scale=0.1)
        # The authors initialise the modulation at zero; random here so that every term of it is exercised.
        w[b + "adaLN_modulation.weight"] = rnd(6 * h, c, scale=0.3 / math.sqrt(c))
        w[b + "adaLN_modulation.bias"] = rnd(6 * h, scale=0.3)
    w["output_layer.norm_final.weight"] = 1 + rnd(h, scale=0.1)
    w["output_layer.linear.weight"] = rnd(vocab, h)
    w["output_layer.linear.bias"] = rnd(vocab, scale=0.1)
    w["output_layer.adaLN_modulation.weight"] = rnd(2 * h, c, scale=0.3 / math.sqrt(c))
    w["output_layer.adaLN_modulation.bias"] = rnd(2 * h, scale=0.3)
    return {prefix + k: v.float() for k, v in w.items()}


def reference_raw(w, prefix, tokens, sigma, time_conditioning, block_size=0):
    """The DiT forward in float64, eval mode (no dropout). block_size > 0: BD3-LM's attention, where a position
    sees the positions of its own block and of the blocks before it."""
    g = {k[len(prefix):]: v.double() for k, v in w.items()}
    h, heads = TINY["hidden"], TINY["heads"]
    d = h // heads
    batch, length = tokens.shape
    sigma = sigma.double() if time_conditioning else torch.zeros_like(sigma, dtype=torch.float64)

    def lin(x, name, bias=True):
        y = x @ g[name + ".weight"].T
        return y + g[name + ".bias"] if bias else y

    def norm(x, weight):  # LayerNorm without bias: plain normalisation, then the weight
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * weight

    half = 128
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float64) / half)
    angle = sigma[:, None] * freqs[None]
    feats = torch.cat([torch.cos(angle), torch.sin(angle)], -1)
    c = torch.nn.functional.silu(lin(torch.nn.functional.silu(lin(feats, "sigma_map.mlp.0")), "sigma_map.mlp.2"))

    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    pos = torch.outer(torch.arange(length, dtype=torch.float64), inv)
    cos, sin = torch.cos(pos), torch.sin(pos)  # [L, d/2]

    def rope(t):  # t [B, L, heads, d]: pairs (i, i + d/2) rotated by the position's angle
        a, b = t[..., : d // 2], t[..., d // 2:]
        cc, ss = cos[None, :, None, :], sin[None, :, None, :]
        return torch.cat([a * cc - b * ss, b * cc + a * ss], -1)

    x = g["vocab_embed.embedding"][tokens]
    for i in range(TINY["blocks"]):
        b = f"blocks.{i}."
        m = lin(c, b + "adaLN_modulation")
        shift1, scale1, gate1, shift2, scale2, gate2 = [m[:, j * h:(j + 1) * h, None].transpose(1, 2) for j in range(6)]
        y = norm(x, g[b + "norm1.weight"]) * (1 + scale1) + shift1
        qkv = lin(y, b + "attn_qkv", bias=False).reshape(batch, length, 3, heads, d)
        q, k, v = rope(qkv[:, :, 0]), rope(qkv[:, :, 1]), qkv[:, :, 2]
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)
        if block_size:
            block = torch.arange(length) // block_size
            scores = scores.masked_fill(block[None, :] > block[:, None], -math.inf)
        att = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(batch, length, h)
        x = x + gate1 * lin(att, b + "attn_out", bias=False)
        y = norm(x, g[b + "norm2.weight"]) * (1 + scale2) + shift2
        x = x + gate2 * lin(torch.nn.functional.gelu(lin(y, b + "mlp.0"), approximate="tanh"), b + "mlp.2")
    m = lin(c, "output_layer.adaLN_modulation")
    shift, scale = m[:, None, :h], m[:, None, h:]
    return lin(norm(x, g["output_layer.norm_final.weight"]) * (1 + scale) + shift, "output_layer.linear")


def clean_log_probs(raw, tokens, mask_id):
    """SUBS: the mask impossible, log-softmax over the rest; an unmasked position keeps its token."""
    out = raw.clone()
    out[..., mask_id] = -math.inf
    out = out.log_softmax(-1)
    out[..., mask_id] = -1e4
    for bi in range(tokens.shape[0]):
        for li in range(tokens.shape[1]):
            if tokens[bi, li] != mask_id:
                out[bi, li] = -1e4
                out[bi, li, tokens[bi, li]] = 0
    return out


def sedd_log_score(raw, tokens, sigma):
    esigm1 = torch.where(sigma < 0.5, torch.expm1(sigma), torch.exp(sigma) - 1).log()
    out = raw - esigm1[:, None, None] - math.log(raw.shape[-1] - 1)
    return out.scatter(-1, tokens[..., None], 0.0)


def inputs(vocab, gen):
    mask_id = vocab - 1
    tokens = torch.randint(0, vocab - 1, (3, 12), generator=gen)
    tokens[0, ::2] = mask_id            # half masked
    tokens[1, :] = mask_id              # all masked
    tokens[2, 3:7] = mask_id            # a masked span
    sigma = torch.tensor([0.05, 1.3, 6.9], dtype=torch.float64)  # small (expm1 branch), middle, near t = 1
    return tokens, sigma


def write_model(out, name, config, weights, shards=1):
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if shards == 1:
        save_safetensors(os.path.join(folder, "model.safetensors"), weights)
        return
    names = list(weights)
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: weights[n] for n in names[s::shards]}
        save_safetensors(os.path.join(folder, file), part)
        weight_map.update({n: file for n in part})
    total = sum(nbytes(t) for t in weights.values())
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def byte_level_alphabet():
    """GPT-2's printable stand-in for each byte: printable Latin-1 bytes stand for themselves, the rest map to
    256 + n in byte order."""
    kept = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in kept:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def write_gpt2_like_tokenizer(folder, size):
    """vocab.json and merges.txt in GPT-2's own format with `size` tokens: the 256 bytes, merges learnt from a
    small text (the most frequent adjacent pair first), and <|endoftext|> last."""
    chars = byte_level_alphabet()
    text = ("the cat sat on the mat and the dog sat on the log then the cat and the dog ate the food at the "
            "restaurant near the river in the city centre where the food is cheap and the coffee is good ") * 3
    words = [[chars[b] for b in (" " + w if i else w).encode()] for i, w in enumerate(text.split())]
    vocab = [chars[b] for b in range(256)]
    merges = []
    while len(vocab) < size - 1:
        pairs = {}
        for w in words:
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + 1
        if not pairs:
            raise SystemExit("the fixture's text has too few pairs for a vocabulary of %d" % size)
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        vocab.append(best[0] + best[1])
        for w in words:
            i = 0
            while i + 1 < len(w):
                if (w[i], w[i + 1]) == best:
                    w[i:i + 2] = [best[0] + best[1]]
                i += 1
    vocab.append("<|endoftext|>")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(vocab)}, f, ensure_ascii=False)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))


def main():
    if sys.argv[1] == "--real-size":
        TINY.update(hidden=768, cond=128, blocks=12, heads=12, length=1024, tokens=50257)
        vocab = TINY["tokens"] + 1
        config = {"architectures": ["MDLM"], "cond_dim": 128, "dropout": 0.1, "hidden_dim": 768, "model_length": 1024,
                  "model_type": "mdlm", "n_blocks": 12, "n_heads": 12, "return_dict": False,
                  "time_conditioning": False, "torch_dtype": "float32", "transformers_version": "4.38.2",
                  "vocab_size": vocab}
        gen = torch.Generator().manual_seed(17)
        w = random_weights("backbone.", vocab, gen)
        write_model(sys.argv[2], "", config, w)
        # The reference at this size, once: 16 positions, half masked (the float64 copy of the weights needs 1.4 GB).
        tokens = torch.randint(0, vocab - 1, (1, 16), generator=gen)
        tokens[0, ::2] = vocab - 1
        raw = reference_raw(w, "backbone.", tokens, torch.zeros(1), False)
        save_safetensors(os.path.join(sys.argv[2], "reference.safetensors"), {"tokens": tokens, "logits": raw.float()})
        return
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    gen = torch.Generator().manual_seed(17)
    vocab = TINY["tokens"] + 1
    reference = {}

    def mdlm_config(time_conditioning):
        # The fields of kuleshov-group/mdlm-owt's config.json (an MDLMConfig written by transformers).
        return {"architectures": ["MDLM"],
                "auto_map": {"AutoConfig": "configuration_mdlm.MDLMConfig",
                             "AutoModelForMaskedLM": "modeling_mdlm.MDLM"},
                "cond_dim": TINY["cond"], "dropout": 0.1, "hidden_dim": TINY["hidden"],
                "model_length": TINY["length"], "model_type": "mdlm", "n_blocks": TINY["blocks"],
                "n_heads": TINY["heads"], "return_dict": False, "time_conditioning": time_conditioning,
                "torch_dtype": "float32", "transformers_version": "4.38.2", "vocab_size": vocab}

    for name, time_conditioning, shards in (("mdlm", False, 1), ("mdlm_time_sharded", True, 3)):
        w = random_weights("backbone.", vocab, gen)
        write_model(out, name, mdlm_config(time_conditioning), w, shards)
        tokens, sigma = inputs(vocab, gen)
        raw = reference_raw(w, "backbone.", tokens, sigma, time_conditioning)
        reference.update({f"{name}.tokens": tokens, f"{name}.sigma": sigma.float(), f"{name}.raw": raw.float(),
                          f"{name}.clean_log_probs": clean_log_probs(raw, tokens, vocab - 1).float()})

    # louaaron/sedd-small's config.json is the training config the model was built from (SEDD(config) with
    # PyTorchModelHubMixin): the network reads tokens, graph.type and model.*.
    sedd_config = {"ngpus": 8, "tokens": TINY["tokens"],
                   "training": {"batch_size": 512, "accum": 1, "n_iters": 1300001, "ema": 0.9999},
                   "data": {"train": "openwebtext", "valid": "wikitext103", "cache_dir": "data"},
                   "graph": {"type": "absorb", "file": "data", "report_all": False},
                   "noise": {"type": "loglinear", "sigma_min": 1e-4, "sigma_max": 20},
                   "sampling": {"predictor": "euler", "steps": 128, "noise_removal": True},
                   "eval": {"batch_size": 512, "perplexity": True, "perplexity_batch_size": 32},
                   "optim": {"weight_decay": 0, "optimizer": "AdamW", "lr": 3e-4},
                   "model": {"name": "small", "type": "ddit", "hidden_size": TINY["hidden"], "cond_dim": TINY["cond"],
                             "length": TINY["length"], "n_blocks": TINY["blocks"], "n_heads": TINY["heads"],
                             "scale_by_sigma": True, "dropout": 0.1}}
    w = random_weights("", vocab, gen)
    write_model(out, "sedd", sedd_config, w)
    tokens, sigma = inputs(vocab, gen)
    raw = reference_raw(w, "", tokens, sigma, True)
    reference.update({"sedd.tokens": tokens, "sedd.sigma": sigma.float(), "sedd.raw": raw.float(),
                      "sedd.log_score": sedd_log_score(raw, tokens, sigma).float(),
                      "sedd.clean_log_probs": clean_log_probs(raw, tokens, vocab - 1).float()})
    # UDLM and DUO: the same DiT under "backbone.", uniform noise, no mask (DUO's last id is GPT-2's added [PAD]);
    # config fields of discrete-diffusion-guidance's configuration_udlm.py and of the copies of DUO's
    # configuration_duo.py. Their output is x_theta: a log-softmax over every token. The denoiser's posterior given
    # all of x_t, at alpha = 1 - (1 - 1e-3) t: post(y) proportional to x_theta(y) (alpha [y = x_t] + (1 - alpha) / V).
    hub = {"return_dict": False, "torch_dtype": "float32", "transformers_version": "4.49.0", "dropout": 0.1,
           "cond_dim": TINY["cond"], "hidden_dim": TINY["hidden"], "model_length": TINY["length"],
           "n_blocks": TINY["blocks"], "n_heads": TINY["heads"], "vocab_size": vocab}
    uniform_configs = {
        "udlm": dict(hub, architectures=["UDLM"], model_type="udlm", time_conditioning=True, cfg=False,
                     cfg_num_classes=-1,
                     auto_map={"AutoConfig": "configuraction_udlm.UDLMConfig",
                               "AutoModelForMaskedLM": "modeling_udlm.UDLM"}),
        "duo": dict(hub, architectures=["DUO"], model_type="duo", causal=False, var_min=True,
                    auto_map={"AutoConfig": "configuration_duo.DUOConfig",
                              "AutoModelForMaskedLM": "modeling_duo.DUO"}),
    }
    for name, config in uniform_configs.items():
        w = random_weights("backbone.", vocab, gen)
        write_model(out, name, config, w)
        tokens = torch.randint(0, vocab, (3, 12), generator=gen)
        t = torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64)
        alpha = 1 - (1 - 1e-3) * t
        sigma = -torch.log(alpha)
        raw = reference_raw(w, "backbone.", tokens, sigma, True)
        x_theta = raw.log_softmax(-1)
        evidence = (1 - alpha[:, None, None]) / vocab + alpha[:, None, None] * torch.nn.functional.one_hot(tokens, vocab)
        posterior = (x_theta + evidence.log()).log_softmax(-1)
        reference.update({f"{name}.tokens": tokens, f"{name}.t": t.float(), f"{name}.sigma": sigma.float(),
                          f"{name}.raw": raw.float(), f"{name}.clean_log_probs": x_theta.float(),
                          f"{name}.posterior": posterior.float()})
    # BD3-LM (kuleshov-group/bd3lm-owt-block_size4's config.json fields): MDLM's DiT under "backbone." with
    # block-causal attention over blocks of block_size, no time conditioning, and its clipped noise range as two
    # scalar buffers beside the backbone (var_min).
    bd3lm_config = {"architectures": ["BD3LM"], "attn_backend": "sdpa", "block_size": 4, "cond_dim": TINY["cond"],
                    "cross_attn": True, "dropout": 0.1, "hidden_dim": TINY["hidden"], "model_length": TINY["length"],
                    "model_type": "bd3lm", "n_blocks": TINY["blocks"], "n_heads": TINY["heads"], "return_dict": False,
                    "sampling_eps_max": 0.999, "sampling_eps_min": 0.001, "time_conditioning": False,
                    "torch_dtype": "float32", "transformers_version": "4.49.0", "var_min": True, "vocab_size": vocab,
                    "auto_map": {"AutoConfig": "configuration_bd3lm.BD3LMConfig",
                                 "AutoModelForMaskedLM": "modeling_bd3lm.BD3LM"}}
    w = random_weights("backbone.", vocab, gen)
    w["sampling_eps_min"] = torch.tensor(0.001)
    w["sampling_eps_max"] = torch.tensor(0.999)
    write_model(out, "bd3lm", bd3lm_config, w)
    tokens, sigma = inputs(vocab, gen)
    raw = reference_raw(w, "backbone.", tokens, sigma, False, block_size=4)
    reference.update({"bd3lm.tokens": tokens, "bd3lm.sigma": sigma.float(), "bd3lm.raw": raw.float(),
                      "bd3lm.clean_log_probs": clean_log_probs(raw, tokens, vocab - 1).float()})
    save_safetensors(os.path.join(out, "reference.safetensors"), reference)
    # A GPT-2-like tokenizer of the tiny vocabulary less the mask, to sample the tiny checkpoints as models.
    write_gpt2_like_tokenizer(os.path.join(out, "gpt2_like_tokenizer"), TINY["tokens"])


if __name__ == "__main__":
    main()
