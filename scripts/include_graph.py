#!/usr/bin/env python3
"""The include graph of Rudder's layers, from the #include lines of the sources.

Prints which layer includes which (the picture in docs/design.md); with --check, exits 1 if a file includes a
header of a layer its own may not use (an include that runs upwards or sideways), or a header that does not exist
where its layer keeps them.

Usage: scripts/include_graph.py [--check] [SOURCE_DIR]
"""
import pathlib
import re
import sys

# Layers, bottom first, with the layers each may include. A library's public headers are included as
# <rudder/<layer>/...>; the SDK's as <rudder/rudder_*.h*>; the C API's as <rudder/rudder.h>; private ones quoted.
ALLOWED = {
    "sdk": set(),
    "base": set(),
    "plugins": {"sdk", "base"},
    "text": {"sdk"},
    "nn": {"sdk", "text"},
    "syntax": {"sdk", "text", "nn"},
    "runtime": {"sdk", "base", "plugins", "text", "nn"},
    "train": {"sdk", "text", "nn", "syntax"},
    "serve": {"sdk", "base", "plugins", "text", "nn", "runtime"},
    "eval": {"sdk", "base", "plugins", "text", "nn", "runtime"},
    "cli": {"sdk", "base", "plugins", "text", "nn", "syntax", "runtime", "train", "serve", "eval"},
    "embed": {"sdk", "base", "plugins", "text", "nn", "runtime"},
    "controllers": {"sdk", "text", "syntax"},
}
HOST_LAYERS = ["base", "plugins", "text", "nn", "syntax", "runtime", "train", "serve", "eval", "cli", "embed"]
SOURCE = re.compile(r"\.(c|cc|cpp|h|hpp)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def layer_of(path, root):
    parts = path.relative_to(root).parts
    if parts[0] == "sdk":
        return "sdk"
    if parts[0] == "controllers":
        return "controllers"
    if parts[0] == "host" and len(parts) > 2 and parts[1] in HOST_LAYERS:
        return parts[1]
    return None


def target_of(kind, name, source, root):
    """The layer an include names, the file it resolves to (None if missing), or (None, None) for a system header."""
    if kind == "<":
        if name in ("rudder/rudder_plugin.h", "rudder/rudder_controller.hpp", "rudder/rudder_json.hpp"):
            return "sdk", root / "sdk" / "include" / name
        if name == "rudder/rudder.h":
            return "embed", root / "host" / "embed" / "include" / name
        m = re.match(r"rudder/(\w+)/", name)
        if m and m.group(1) in HOST_LAYERS:
            return m.group(1), root / "host" / m.group(1) / "include" / name
        return None, None
    candidate = (source.parent / name).resolve()
    return layer_of(candidate, root) if candidate.exists() else layer_of(source, root), candidate


def main(argv):
    check = "--check" in argv
    args = [a for a in argv if not a.startswith("--")]
    root = pathlib.Path(args[0] if args else pathlib.Path(__file__).resolve().parent.parent).resolve()
    edges, problems = {}, []
    for directory in ("sdk", "host", "controllers"):
        for source in sorted((root / directory).rglob("*")):
            if not SOURCE.search(source.name):
                continue
            layer = layer_of(source, root)
            if layer is None:
                problems.append(f"{source.relative_to(root)}: in no layer's folder")
                continue
            for kind, name in INCLUDE.findall(source.read_text(errors="replace")):
                target, path = target_of(kind, name, source, root)
                if target is None and path is None:
                    continue
                where = f"{source.relative_to(root)}: #include {kind}{name}{'>' if kind == '<' else chr(34)}"
                if path is None or not path.exists():
                    problems.append(f"{where}: no such header in {target}'s folder")
                    continue
                if target != layer:
                    edges.setdefault(layer, {}).setdefault(target, 0)
                    edges[layer][target] += 1
                    if target not in ALLOWED[layer]:
                        problems.append(f"{where}: {layer} may not include {target}")
    print("layer        includes (number of #include lines)")
    for layer in ALLOWED:
        used = edges.get(layer, {})
        text = ", ".join(f"{t} ({n})" for t, n in sorted(used.items(), key=lambda kv: list(ALLOWED).index(kv[0])))
        print(f"{layer:<12} {text or '-'}")
    for p in problems:
        print("PROBLEM:", p)
    if check and problems:
        return 1
    if check:
        print("ok: every include runs downwards")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
