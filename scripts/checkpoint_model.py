#!/usr/bin/env python3
"""A model folder from a training checkpoint, to sample a run before it ends.

    python3 scripts/checkpoint_model.py TRAIN_OUT/checkpoint/checkpoint-000008000.safetensors LIKE_MODEL OUT

Writes OUT/model.safetensors with the checkpoint's network weights (its `network.<name>` tensors, or their moving
average `ema.<name>` when the run keeps one, as the finished model would; without AdamW's state), OUT/vocab.txt from the checkpoint's folder, and OUT/config.json from LIKE_MODEL, a finished model of the same
kind and shape (e.g. the model the run started from), with "checkpoint" naming where the weights came from. The
network's shapes are checked against LIKE_MODEL's weights; a checkpoint of a run grown deeper than LIKE_MODEL
(more trunk blocks, each shaped as LIKE_MODEL's) gets LIKE_MODEL's config with its own number of layers.
"""
import json
import shutil
import struct
import sys
from pathlib import Path


def read_safetensors(path):
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    return header, data[8 + n:]


def blocks(names):
    """How many trunk blocks a network's tensor names hold."""
    found = {name.split(".")[2] for name in names if name.startswith("trunk.blocks.")}
    return len(found)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    checkpoint, like, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    header, body = read_safetensors(checkpoint)
    like_header, _ = read_safetensors(like / "model.safetensors")
    # A run with training.ema writes its model from the weights' moving average: so does this script.
    source = "ema." if any(name.startswith("ema.") for name in header) else "network."
    tensors = {}
    for name, info in header.items():
        if name.startswith(source):
            tensors[name[len(source):]] = info
    if source == "ema.":  # buffers have no average
        for name, info in header.items():
            if name.startswith("network.") and name[len("network."):] not in tensors:
                tensors[name[len("network."):]] = info
    expected = {k: v["shape"] for k, v in like_header.items() if k != "__metadata__"}
    found = {k: v["shape"] for k, v in tensors.items()}
    # A run grown deeper than LIKE_MODEL (`training.init_from` with more layers): its extra blocks are LIKE_MODEL's
    # first block again, and the config says the checkpoint's depth.
    layers = blocks(found)
    if layers > blocks(expected) > 0:
        first = {k[len("trunk.blocks.0."):]: v for k, v in expected.items() if k.startswith("trunk.blocks.0.")}
        for i in range(blocks(expected), layers):
            expected.update({f"trunk.blocks.{i}.{k}": v for k, v in first.items()})
    if expected != found:
        missing = sorted(set(expected) ^ set(found)) or sorted(k for k in expected if expected[k] != found.get(k))
        sys.exit(f"{checkpoint}: its network does not have {like}'s tensors and shapes (first difference: {missing[:3]})")
    out.mkdir(parents=True, exist_ok=True)
    new_header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        begin, end = tensors[name]["data_offsets"]
        chunk = body[begin:end]
        new_header[name] = {"dtype": tensors[name]["dtype"], "shape": tensors[name]["shape"],
                            "data_offsets": [offset, offset + len(chunk)]}
        chunks.append(chunk)
        offset += len(chunk)
    encoded = json.dumps(new_header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for chunk in chunks:
            f.write(chunk)
    shutil.copy(checkpoint.parent / "vocab.txt", out / "vocab.txt")
    config = json.loads((like / "config.json").read_text())
    config["checkpoint"] = str(checkpoint.resolve())
    if layers > blocks(like_header):
        config["network"]["layers"] = layers
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"{out}: {len(tensors)} tensors from {checkpoint}")


if __name__ == "__main__":
    main()
