#!/usr/bin/env python3
"""The docs' lists of layers, first-party controllers and bundled models are the tree's.

What the tree has:
  - layers: the folders under host/ with a CMakeLists.txt;
  - controllers: the ids of RUDDER_CONTROLLER(desc, Class, "id", ...) in the sources of each library that
    controllers/CMakeLists.txt adds (rudder_add_controller(name SOURCES ...));
  - bundled models: the folders under models/ with a config.json.

What the docs say (each list is read out of its table cell, by the names written in `backticks`):
  - README.md's "What is here" table: the `host/` row's layers (the names outside parentheses), the `controllers/`
    row's controllers, the `models/` row's models, the `docs/` row's pages (its links, against docs/*.md);
  - docs/design.md's layers table: one `host/<layer>/` row per layer, and the `controllers/` row's controllers;
  - docs/recipes.md's "First-party controllers" table: the first column's controllers;
  - docs/models.md's "Bundled models" table: the first column's models.

Fails naming each list and what it misses or has extra. Usage: docs_lists_test.py SOURCE_DIR
"""
import re
import sys
from pathlib import Path

# Backticked words a controllers cell may hold that name neither a controller nor a library: the run service the
# `cfg` library calls.
OTHER_CONTROLLER_WORDS = {"denoise"}
MODEL_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)+$")  # every bundled model's name has a hyphen
WORD = re.compile(r"^[a-z][a-z0-9_]*$")


def tree_layers(root):
    return {p.parent.name for p in (root / "host").glob("*/CMakeLists.txt")}


def tree_controllers(root):
    """The controller ids, and the libraries that offer several (a doc may name those too)."""
    cmake = (root / "controllers" / "CMakeLists.txt").read_text()
    ids, libraries = set(), set()
    for name, sources in re.findall(r"^\s*rudder_add_controller\(\s*(\w+)\s+SOURCES\s+([^)]*?)(?:\s+LIBRARIES|\))",
                                    cmake, re.MULTILINE):
        offered = set()
        for source in sources.split():
            text = (root / "controllers" / source).read_text()
            offered.update(re.findall(r'RUDDER_CONTROLLER\(\s*\w+\s*,\s*\w+\s*,\s*"([^"]+)"', text))
        ids |= offered
        if len(offered) > 1:
            libraries.add(name)
    return ids, libraries


def tree_models(root):
    return {p.parent.name for p in (root / "models").glob("*/config.json")}


def cells(line):
    """A Markdown table row's cells (a `|` inside backticks or escaped as `\\|` does not split)."""
    out, cell, in_code, i = [], "", False, 0
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|"):
        body = body[:-1]
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cell += "|"
            i += 2
            continue
        if c == "`":
            in_code = not in_code
        if c == "|" and not in_code:
            out.append(cell.strip())
            cell = ""
        else:
            cell += c
        i += 1
    out.append(cell.strip())
    return out


def backticked(text, outside_parentheses=False):
    """The `names` in text, in order; with outside_parentheses, only those at no depth of ( )."""
    names, depth, i = [], 0, 0
    while i < len(text):
        c = text[i]
        if c == "`":
            end = text.find("`", i + 1)
            if end < 0:
                break
            if not outside_parentheses or depth == 0:
                names.append(text[i + 1 : end])
            i = end + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth = max(0, depth - 1)
        i += 1
    return names


def row(doc, first_cell):
    """The cells of the first table row of doc whose first cell is first_cell."""
    for line in doc.splitlines():
        if line.startswith("|") and cells(line)[0] == first_cell:
            return cells(line)
    return None


def section_table(doc, heading):
    """The rows (cells) of the first table after the heading line, header and rule left out."""
    lines = doc.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        return None
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            rows.append(cells(line))
        elif rows:
            break
    return rows[2:]


class Check:
    def __init__(self):
        self.problems = []

    def same(self, where, what, expected, found):
        missing = sorted(expected - found)
        extra = sorted(found - expected)
        if missing:
            self.problems.append(f"{where}: {what} missing: {', '.join(missing)}")
        if extra:
            self.problems.append(f"{where}: {what} named that the tree does not have: {', '.join(extra)}")

    def absent(self, where, what):
        self.problems.append(f"{where}: no {what} found (the test reads it from there)")


def controller_names(cell, ids, libraries):
    """The controllers a cell names, and the backticked words it has that name neither a controller nor a library
    of several."""
    words = {w for w in backticked(cell) if WORD.match(w) and not w.startswith("rudder_")}
    return words & ids, words - ids - libraries - OTHER_CONTROLLER_WORDS


def check_controllers(check, where, cell, ids, libraries):
    named, unknown = controller_names(cell, ids, libraries)
    check.same(where, "controllers", ids, named | unknown)


def main(argv):
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[2]
    layers = tree_layers(root)
    ids, libraries = tree_controllers(root)
    models = tree_models(root)
    check = Check()
    if not layers or not ids or not models:
        print(f"FAIL: found no layers, controllers or models under {root}")
        return 1

    readme = (root / "README.md").read_text()
    host = row(readme, "`host/`")
    if host:
        check.same("README.md, the `host/` row", "layers", layers, set(backticked(host[1], outside_parentheses=True)))
    else:
        check.absent("README.md", "`host/` row")
    controllers = row(readme, "`controllers/`")
    if controllers:
        check_controllers(check, "README.md, the `controllers/` row", controllers[1], ids, libraries)
    else:
        check.absent("README.md", "`controllers/` row")
    bundled = row(readme, "`models/`")
    if bundled:
        check.same("README.md, the `models/` row", "models", models,
                   {w for w in backticked(bundled[1]) if MODEL_NAME.match(w)})
    else:
        check.absent("README.md", "`models/` row")

    pages = row(readme, "`docs/`")
    if pages:
        check.same("README.md, the `docs/` row", "pages", {p.name for p in (root / "docs").glob("*.md")},
                   set(re.findall(r"\]\(docs/([^)#]+\.md)\)", pages[1])))
    else:
        check.absent("README.md", "`docs/` row")

    design = (root / "docs" / "design.md").read_text()
    rows = [cells(line)[0] for line in design.splitlines() if re.match(r"^\| `host/[^`]*/` \|", line)]
    check.same("docs/design.md, the layers table", "layers", layers, {r[len("`host/") : -len("/`")] for r in rows})
    controllers = row(design, "`controllers/`")
    if controllers and len(controllers) > 2:
        check_controllers(check, "docs/design.md, the `controllers/` row", controllers[2], ids, libraries)
    else:
        check.absent("docs/design.md", "`controllers/` row in the layers table")

    recipes = section_table((root / "docs" / "recipes.md").read_text(), "## First-party controllers")
    if recipes:
        named = set()
        for cells_of_row in recipes:
            named.update(backticked(cells_of_row[0]))
        check.same("docs/recipes.md, the first-party controllers table", "controllers", ids, named)
    else:
        check.absent("docs/recipes.md", "table under '## First-party controllers'")

    table = section_table((root / "docs" / "models.md").read_text(), "## Bundled models")
    if table:
        named = set()
        for cells_of_row in table:
            named.update(backticked(cells_of_row[0]))
        check.same("docs/models.md, the bundled models table", "models", models, named)
    else:
        check.absent("docs/models.md", "table under '## Bundled models'")

    if check.problems:
        for problem in check.problems:
            print("FAIL: " + problem)
        return 1
    print(f"ok: {len(layers)} layers, {len(ids)} controllers, {len(models)} models and the docs' pages, as README.md, "
          "docs/design.md, docs/recipes.md and docs/models.md list them")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
