#!/usr/bin/env python3
"""The include graph of Rudder's layers, from the #include lines of the sources.

Prints which layer includes which. With --check, exits 1 if
  - a file includes a header of a layer its own may not use (an include that runs upwards or sideways), or a header
    that does not exist where its layer keeps them;
  - a layer publishes a header (include/rudder/<layer>/) that no other layer includes, directly or through another
    public header of its own: such a header belongs in the layer's src/;
  - docs/design.md's include graph (the block between its include-graph markers) is not what this script prints, or
    its layers table lacks a row for a layer's folder.
With --write-doc, writes the block into docs/design.md.

Usage: scripts/include_graph.py [--check | --write-doc] [SOURCE_DIR]
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
    "grammar": {"sdk"},
    "nn": {"sdk", "base", "text"},
    "syntax": {"sdk", "text", "nn"},
    "runtime": {"sdk", "base", "plugins", "text", "nn"},
    "train": {"sdk", "text", "nn", "syntax"},
    "serve": {"sdk", "base", "plugins", "text", "nn", "runtime"},
    "eval": {"sdk", "base", "plugins", "text", "nn", "runtime"},
    "cli": {"sdk", "base", "plugins", "text", "nn", "syntax", "runtime", "train", "serve", "eval"},
    "embed": {"sdk", "base", "plugins", "text", "nn", "runtime"},
    "controllers": {"sdk", "text", "grammar", "syntax"},
}
HOST_LAYERS = ["base", "plugins", "text", "grammar", "nn", "syntax", "runtime", "train", "serve", "eval", "cli", "embed"]
# Layers whose public headers are written for users being built in the same issue: exempt from the unused-header
# check until then. Remove the entry when the first user includes them.
AWAITING_USERS = {}
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


DOC_BEGIN = "<!-- include graph: written by scripts/include_graph.py --write-doc, checked by house.include_graph -->"
DOC_END = "<!-- end of include graph -->"


def graph_text(edges):
    """The block docs/design.md shows: what each layer includes (counts of #include lines), then what it may."""
    lines = ["```", "layer        includes (number of #include lines)"]
    for layer in ALLOWED:
        used = edges.get(layer, {})
        text = ", ".join(f"{t} ({n})" for t, n in sorted(used.items(), key=lambda kv: list(ALLOWED).index(kv[0])))
        lines.append(f"{layer:<12} {text or '-'}")
    lines += ["", "layer        may include"]
    for layer, allowed in ALLOWED.items():
        lines.append(f"{layer:<12} {', '.join(l for l in ALLOWED if l in allowed) or '-'}")
    return "\n".join(lines + ["```"])


def doc_problems(root, text):
    """How docs/design.md differs from the graph and the layers."""
    doc = (root / "docs" / "design.md").read_text()
    if DOC_BEGIN not in doc or DOC_END not in doc:
        return ["docs/design.md: no include-graph markers"]
    problems = []
    shown = doc.split(DOC_BEGIN, 1)[1].split(DOC_END, 1)[0].strip()
    if shown != text:
        problems.append("docs/design.md: the include graph is stale; run scripts/include_graph.py --write-doc")
    for folder in ["sdk/"] + [f"host/{layer}/" for layer in HOST_LAYERS] + ["controllers/"]:
        if f"| `{folder}` |" not in doc:
            problems.append(f"docs/design.md: the layers table has no row for `{folder}`")
    return problems


def write_doc(root, text):
    path = root / "docs" / "design.md"
    doc = path.read_text()
    before, rest = doc.split(DOC_BEGIN, 1)
    after = rest.split(DOC_END, 1)[1]
    path.write_text(before + DOC_BEGIN + "\n" + text + "\n" + DOC_END + after)


def unused_public_headers(root, included):
    """Public headers of a host layer that no other layer includes, directly or through a public header of its own
    layer that is (tests and benchmarks, which may include private headers, do not count)."""
    problems = []
    for layer in HOST_LAYERS:
        if layer == "embed":  # the C API: its header is for applications, not for other layers
            continue
        if layer in AWAITING_USERS:
            continue
        folder = root / "host" / layer / "include"
        public = {p.resolve() for p in folder.rglob("*") if SOURCE.search(p.name)}
        used = {h for h in public if any(src_layer != layer for src_layer in included.get(h, ()))}
        grew = True
        while grew:  # a header that a used public header includes is used too
            grew = False
            for h in public - used:
                if any(includer in used for includer in included.get(h, {}).get(layer, ())):
                    used.add(h)
                    grew = True
        problems += [f"{h.relative_to(root)}: public, but no other layer includes it (move it to src/)"
                     for h in sorted(public - used)]
    return problems


def main(argv):
    check = "--check" in argv
    args = [a for a in argv if not a.startswith("--")]
    root = pathlib.Path(args[0] if args else pathlib.Path(__file__).resolve().parent.parent).resolve()
    edges, problems = {}, []
    included = {}  # header path -> {including layer: [including files]}
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
                included.setdefault(path.resolve(), {}).setdefault(layer, []).append(source.resolve())
                if target != layer:
                    edges.setdefault(layer, {}).setdefault(target, 0)
                    edges[layer][target] += 1
                    if target not in ALLOWED[layer]:
                        problems.append(f"{where}: {layer} may not include {target}")
    text = graph_text(edges)
    if "--write-doc" in argv:
        write_doc(root, text)
    print(text)
    problems += unused_public_headers(root, included)
    if check:
        problems += doc_problems(root, text)
    for p in problems:
        print("PROBLEM:", p)
    if check and problems:
        return 1
    if check:
        print("ok: every include runs downwards, every public header is used by another layer, design.md is current")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
