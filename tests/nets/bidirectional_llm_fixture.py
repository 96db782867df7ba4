#!/usr/bin/python3
"""Writes tiny random-weight LLaDA and Dream checkpoints in the public checkpoints' Hugging Face layout, with a
byte-level BPE tokenizer.json holding each model's end-of-text and mask tokens, and the reference outputs of the
same networks computed here in plain PyTorch (float64), for tests/nets/bidirectional_llm_test.

The layout follows GSAI-ML/LLaDA-8B-Base (config.json of an LLaDAConfig, an OLMo-style "llama" block: tensors
under "model.transformer.") and Dream-org/Dream-v0-Base-7B (config.json of a DreamConfig, Qwen2's tensor names);
the math follows the description in host/nn/include/rudder/nn/bidirectional_llm.hpp, written here independently:
rotary positions as complex rotations of the pairs (i, i + d/2), grouped key/value heads by index arithmetic.

usage: bidirectional_llm_fixture.py OUT_DIR     exit 77 when PyTorch is missing (the test then skips)
       bidirectional_llm_fixture.py --size dream-0.5b OUT_DIR
           a random-weight checkpoint of Qwen2.5-0.5B's shape in Dream's layout (bfloat16, 1.2 GB), with
           reference.safetensors beside it (the logits for one input of 16 positions), for bench/checkpoint_bench.cpp
       bidirectional_llm_fixture.py --size llada-8b OUT_DIR
           LLaDA-8B-Base's shape (bfloat16, six shards, 16 GB), each tensor made as it is written; no reference
       bidirectional_llm_fixture.py --size llada-0.5b OUT_DIR
           LLaDA's layout at Qwen2.5-0.5B's shape and vocabulary (bfloat16, 1.2 GB, no reference), for
           bench/fast_dllm.py
       --tokenizer QWEN_TOKENIZER_JSON (with --size dream-0.5b or llada-0.5b): also a tokenizer.json, Qwen2.5's with
           Dream's two added tokens (<|beginoftext|> 151665, <|mask|> 151666), so the checkpoint is a model recipes
           load; and the output matrix 8 times larger, so that the network is as sure of its top tokens as a trained
           one (top probabilities mostly above a half; a plain random one spreads them over 150,000 tokens)
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dit_checkpoint_fixture import (clean_log_probs as subs, save_safetensors, write_gpt2_like_tokenizer,  # noqa: E402
                                    write_model)  # (the import exits 77 without torch)

import torch  # noqa: E402

TOKENIZER_TOKENS = 280          # the byte-level vocabulary (256 bytes + merges), then the added tokens
EOS, MASK = 280, 281            # <|endoftext|> and the mask token, added tokens
NETWORK_VOCAB = 288             # the embedding is padded past the tokenizer, as the public models' are
TINY = dict(hidden=64, heads=4, kv_heads=2, intermediate=96, layers=2, length=32)


def llada_config(theta=500000.0):
    # The fields of GSAI-ML/LLaDA-8B-Base's config.json, at tiny sizes.
    return {"activation_type": "silu", "alibi": False, "alibi_bias_max": 8.0, "architectures": ["LLaDAModelLM"],
            "attention_dropout": 0.0, "attention_layer_norm": False, "attention_layer_norm_with_affine": True,
            "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig",
                         "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
                         "AutoModel": "modeling_llada.LLaDAModelLM"},
            "bias_for_layer_norm": False, "block_group_size": 1, "block_type": "llama", "d_model": TINY["hidden"],
            "embedding_dropout": 0.0, "embedding_size": NETWORK_VOCAB, "eos_token_id": EOS, "flash_attention": False,
            "include_bias": False, "include_qkv_bias": False, "init_cutoff_factor": None, "init_device": "meta",
            "init_fn": "mitchell", "init_std": 0.02, "input_emb_norm": False, "layer_norm_type": "rms",
            "layer_norm_with_affine": True, "mask_token_id": MASK, "max_sequence_length": TINY["length"],
            "mlp_hidden_size": TINY["intermediate"], "mlp_ratio": 4, "model_type": "llada",
            "multi_query_attention": None, "n_heads": TINY["heads"], "n_kv_heads": TINY["kv_heads"],
            "n_layers": TINY["layers"], "pad_token_id": EOS, "precision": "amp_bf16", "residual_dropout": 0.0,
            "rms_norm_eps": 1e-05, "rope": True, "rope_full_precision": True, "rope_theta": theta,
            "scale_logits": False, "transformers_version": "4.46.3", "use_cache": False,
            "vocab_size": EOS + 2, "weight_tying": False}


def dream_config():
    # The fields of Dream-org/Dream-v0-Base-7B's config.json, at tiny sizes.
    return {"architectures": ["DreamModel"], "attention_dropout": 0.0,
            "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
            "bos_token_id": EOS, "eos_token_id": EOS, "hidden_act": "silu", "hidden_size": TINY["hidden"],
            "initializer_range": 0.02, "intermediate_size": TINY["intermediate"], "mask_token_id": MASK,
            "max_position_embeddings": TINY["length"], "max_window_layers": TINY["layers"], "model_type": "Dream",
            "num_attention_heads": TINY["heads"], "num_hidden_layers": TINY["layers"],
            "num_key_value_heads": TINY["kv_heads"], "pad_token_id": EOS, "rms_norm_eps": 1e-06, "rope_scaling": None,
            "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
            "transformers_version": "4.46.2", "use_cache": True, "use_sliding_window": False,
            "vocab_size": NETWORK_VOCAB}


def names(flavor, i):
    if flavor == "llada":
        b = f"model.transformer.blocks.{i}."
        return dict(attn_norm=b + "attn_norm.weight", q=b + "q_proj", k=b + "k_proj", v=b + "v_proj",
                    o=b + "attn_out.weight", ff_norm=b + "ff_norm.weight", gate=b + "ff_proj.weight",
                    up=b + "up_proj.weight", down=b + "ff_out.weight")
    b = f"model.layers.{i}."
    return dict(attn_norm=b + "input_layernorm.weight", q=b + "self_attn.q_proj", k=b + "self_attn.k_proj",
                v=b + "self_attn.v_proj", o=b + "self_attn.o_proj.weight", ff_norm=b + "post_attention_layernorm.weight",
                gate=b + "mlp.gate_proj.weight", up=b + "mlp.up_proj.weight", down=b + "mlp.down_proj.weight")


def top_names(flavor):
    if flavor == "llada":
        return "model.transformer.wte.weight", "model.transformer.ln_f.weight", "model.transformer.ff_out.weight"
    return "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"


def random_weights(flavor, size, vocab, gen, dtype=torch.float32, lazy=False):
    """name -> tensor; with lazy, name -> (shape, dtype, a function that makes the tensor), so a checkpoint of billions
    of parameters is made one tensor at a time as it is written (write_model)."""
    h, inter, heads, kv = size["hidden"], size["intermediate"], size["heads"], size["kv_heads"]
    d = h // heads

    def rnd(*shape, scale=None, offset=0.0):
        def make():
            t = torch.randn(*shape, generator=gen) * (scale if scale is not None else 1 / math.sqrt(shape[-1]))
            return (t + offset).to(dtype)
        return (list(shape), dtype, make) if lazy else make()

    emb, norm, out = top_names(flavor)
    w = {emb: rnd(vocab, h, scale=1.0), norm: rnd(h, scale=0.1, offset=1.0), out: rnd(vocab, h)}
    for i in range(size["layers"]):
        n = names(flavor, i)
        w[n["attn_norm"]] = rnd(h, scale=0.1, offset=1.0)
        w[n["q"] + ".weight"] = rnd(heads * d, h)
        w[n["k"] + ".weight"] = rnd(kv * d, h)
        w[n["v"] + ".weight"] = rnd(kv * d, h)
        if flavor == "dream":
            w[n["q"] + ".bias"] = rnd(heads * d, scale=0.1)
            w[n["k"] + ".bias"] = rnd(kv * d, scale=0.1)
            w[n["v"] + ".bias"] = rnd(kv * d, scale=0.1)
        w[n["o"]] = rnd(h, heads * d)
        w[n["ff_norm"]] = rnd(h, scale=0.1, offset=1.0)
        w[n["gate"]] = rnd(inter, h)
        w[n["up"]] = rnd(inter, h)
        w[n["down"]] = rnd(h, inter)
    return w


def untrained_rows_low(flavor, w, mask=MASK, first_padding=EOS + 2):
    """The output rows of the mask and of the padding past the tokenizer scaled down, as a trained model's are (it is
    never taught to predict them): the authors' samplers take the arg-max over every row, and a random row there would
    commit a token no text has."""
    out = top_names(flavor)[2]
    w[out][mask] *= 0.05
    w[out][first_padding:] *= 0.05
    return w


def write_qwen_tokenizer(source, path):
    """Qwen2.5's tokenizer.json with the two tokens Dream's adds after it."""
    with open(source, encoding="utf-8") as f:
        doc = json.load(f)
    for i, text in ((151665, "<|beginoftext|>"), (151666, "<|mask|>")):
        if all(t["id"] != i for t in doc["added_tokens"]):
            doc["added_tokens"].append({"id": i, "content": text, "single_word": False, "lstrip": False,
                                        "rstrip": False, "normalized": False, "special": True})
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


def reference_logits(flavor, w, config, tokens, shifted=True, window=None, cache=None):
    """The network in float64, position by position where that is clearer than batched tensor code; Dream's shifted
    to the position each row predicts unless `shifted` is False (as Dream's own forward returns them). Fast-dLLM's
    key/value caches: with `cache` (a dict) and no `window`, every layer's keys and values are kept there; with
    `window` (begin, end), only those positions run, their queries reading the cached keys and values of the others."""
    w = {k: v.double() for k, v in w.items()}
    h, heads, kv = TINY["hidden"], TINY["heads"], TINY["kv_heads"]
    d = h // heads
    theta = config["rope_theta"]
    eps = config["rms_norm_eps"]
    B = tokens.shape[0]
    begin, end = window or (0, tokens.shape[1])
    L = end - begin  # the positions run
    emb, norm, out = top_names(flavor)

    def rms(x, weight):
        return weight * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)

    def rotate(t):  # t [B, L, n, d]: the pair (t_j, t_{j + d/2}) as a complex number turned by position * freq_j
        freq = theta ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
        angle = torch.arange(begin, end, dtype=torch.float64)[:, None] * freq[None, :]  # [L, d/2]
        z = torch.complex(t[..., : d // 2], t[..., d // 2:]) * torch.polar(torch.ones_like(angle), angle)[None, :, None, :]
        return torch.cat([z.real, z.imag], -1)

    def lin(x, name, bias):  # q, k, v: "<name>.weight" and, for Dream, "<name>.bias"
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if bias else y

    x = w[emb][tokens[:, begin:end]]
    for i in range(TINY["layers"]):
        n = names(flavor, i)
        a = rms(x, w[n["attn_norm"]])
        biased = flavor == "dream"
        q = rotate(lin(a, n["q"], biased).view(B, L, heads, d))
        k = rotate(lin(a, n["k"], biased).view(B, L, kv, d))
        v = lin(a, n["v"], biased).view(B, L, kv, d)
        if window is not None:  # the other positions' keys and values from the cache
            ck, cv = cache[i]
            k = torch.cat([ck[:, :begin], k, ck[:, end:]], 1)
            v = torch.cat([cv[:, :begin], v, cv[:, end:]], 1)
        elif cache is not None:
            cache[i] = (k, v)
        attended = torch.zeros(B, L, heads, d, dtype=torch.float64)
        for head in range(heads):
            g = head // (heads // kv)  # the key/value head this query head reads
            scores = torch.einsum("bid,bjd->bij", q[:, :, head], k[:, :, g]) / math.sqrt(d)
            attended[:, :, head] = torch.einsum("bij,bjd->bid", scores.softmax(-1), v[:, :, g])
        x = x + attended.reshape(B, L, h) @ w[n["o"]].T
        m = rms(x, w[n["ff_norm"]])
        gate = m @ w[n["gate"]].T
        x = x + (gate * torch.sigmoid(gate) * (m @ w[n["up"]].T)) @ w[n["down"]].T
    logits = rms(x, w[norm]) @ w[out].T
    if flavor == "dream" and shifted:  # the prediction for position i comes from position i - 1; 0 keeps its own
        logits = torch.cat([logits[:, :1], logits[:, :-1]], 1)
    return logits


def clean_log_probs(logits, tokens, vocab):
    """SUBS over the tokenizer's ids (the embedding's padding rows left out)."""
    return subs(logits[..., :vocab], tokens, MASK)


def write_tokenizer_json(folder, mask_text):
    """A Hugging Face tokenizer.json over the GPT-2-like vocabulary, with <|endoftext|> and the mask as added
    tokens (ids EOS and MASK), as the public models' files hold theirs."""
    scratch = os.path.join(folder, "_gpt2")
    write_gpt2_like_tokenizer(scratch, TOKENIZER_TOKENS + 1)
    with open(os.path.join(scratch, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(scratch, "merges.txt"), encoding="utf-8") as f:
        merges = [line.rstrip("\n") for line in f if line.strip() and not line.startswith("#version")]
    vocab.pop("<|endoftext|>")
    assert len(vocab) == TOKENIZER_TOKENS, len(vocab)

    def added(i, text):
        return {"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True}

    doc = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [added(EOS, "<|endoftext|>"), added(MASK, mask_text)],
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                     "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                     "merges": merges}}
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    for name in ("vocab.json", "merges.txt"):
        os.remove(os.path.join(scratch, name))
    os.rmdir(scratch)


def main():
    if sys.argv[1] == "--size":
        # Public shapes: Dream's is Qwen2.5-0.5B's (Dream-7B is Qwen2.5-7B's); LLaDA's the 1B of its scaling runs.
        shape, out = sys.argv[2], sys.argv[3]
        tokenizer = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--tokenizer" else None
        gen = torch.Generator().manual_seed(5)
        if tokenizer:
            write_qwen_tokenizer(tokenizer, os.path.join(out, "tokenizer.json"))
        sure = 8.0 if tokenizer else 1.0

        def confident(flavor, w):
            w[top_names(flavor)[2]] *= sure
            return w
        if shape in ("llada-0.5b", "dream-0.5b"):  # Qwen2.5-0.5B's dimensions
            TINY.update(hidden=896, heads=14, kv_heads=2, intermediate=4864, layers=24, length=1024)
        if shape == "llada-0.5b":
            config = llada_config()
            config.update(d_model=896, n_heads=14, n_kv_heads=2, mlp_hidden_size=4864, n_layers=24,
                          max_sequence_length=1024, embedding_size=151936, vocab_size=151936, mask_token_id=151666,
                          eos_token_id=151643, pad_token_id=151643)
            w = untrained_rows_low("llada", confident("llada", random_weights("llada", TINY, 151936, gen,
                                                                               torch.bfloat16)),
                                   mask=151666, first_padding=151667)
            write_model(out, "", config, w)
            return
        if shape == "dream-0.5b":
            config = dream_config()
            config.update(hidden_size=896, num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864,
                          num_hidden_layers=24, max_window_layers=24, max_position_embeddings=1024, vocab_size=151936,
                          mask_token_id=151666, eos_token_id=151643, bos_token_id=151643, pad_token_id=151643,
                          tie_word_embeddings=False)
            flavor, vocab = "dream", 151936
        elif shape == "llada-8b":
            # GSAI-ML/LLaDA-8B-Base's shape, bfloat16 in six shards as published: 16 GB, no reference (its float64
            # weights would need 64 GB); its parity is the smaller sizes'. For the load and memory measurement.
            TINY.update(hidden=4096, heads=32, kv_heads=32, intermediate=12288, layers=32, length=4096)
            config = llada_config()
            config.update(d_model=4096, n_heads=32, n_kv_heads=32, mlp_hidden_size=12288, n_layers=32,
                          max_sequence_length=4096, embedding_size=126464, vocab_size=126464, mask_token_id=126336,
                          eos_token_id=126081, pad_token_id=126081)
            write_model(out, "", config, random_weights("llada", TINY, 126464, gen, torch.bfloat16, lazy=True), 6)
            return
        else:
            raise SystemExit("unknown size " + shape)
        w = untrained_rows_low(flavor, confident(flavor, random_weights(flavor, TINY, vocab, gen, torch.bfloat16)),
                               mask=151666, first_padding=151667)
        write_model(out, "", config, w)
        # The reference at this size, once: 16 positions, half masked (float64 weights: 8 bytes a parameter).
        tokens = torch.randint(0, 151643, (1, 16), generator=gen)
        tokens[0, ::2] = config["mask_token_id"]
        save_safetensors(os.path.join(out, "reference.safetensors"),
                         {"tokens": tokens, "logits": reference_logits(flavor, w, config, tokens).float()})
        return
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    gen = torch.Generator().manual_seed(23)
    reference = {}
    for flavor, config, mask_text, shards in (("llada", llada_config(), "<|mdm_mask|>", 1),
                                              ("dream", dream_config(), "<|mask|>", 2)):
        w = untrained_rows_low(flavor, random_weights(flavor, TINY, NETWORK_VOCAB, gen))
        folder = os.path.join(out, flavor)
        write_model(out, flavor, config, w, shards)
        write_tokenizer_json(folder, mask_text)
        tokens = torch.randint(0, TOKENIZER_TOKENS, (3, 20), generator=gen)
        tokens[0, ::2] = MASK
        tokens[1, :] = MASK
        tokens[2, 5:12] = MASK
        logits = reference_logits(flavor, w, config, tokens)
        reference.update({f"{flavor}.tokens": tokens, f"{flavor}.logits": logits.float(),
                          f"{flavor}.clean_log_probs": clean_log_probs(logits, tokens, EOS + 2).float()})
    # LLaDA with weights stored in bfloat16 (as the public files are): widened on load, the same network.
    w = random_weights("llada", TINY, NETWORK_VOCAB, gen, torch.bfloat16)
    write_model(out, "llada_bf16", llada_config(theta=10000.0), w)
    write_tokenizer_json(os.path.join(out, "llada_bf16"), "<|mdm_mask|>")
    tokens = torch.randint(0, TOKENIZER_TOKENS, (2, 9), generator=gen)
    reference.update({"llada_bf16.tokens": tokens,
                      "llada_bf16.logits": reference_logits("llada", w, llada_config(theta=10000.0), tokens).float()})
    save_safetensors(os.path.join(out, "reference.safetensors"), reference)


if __name__ == "__main__":
    main()
