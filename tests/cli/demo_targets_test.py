#!/usr/bin/env python3
"""make demo builds only the CMake target rudder_demo (the CLI and some plugins): every plugin that the recipes of
scripts/demo.sh name must live in one of its plugin libraries.

usage: demo_targets_test.py RUDDER SOURCE_DIR LIBRARY_FILE_NAME...
"""
import json
import os
import re
import subprocess
import sys

rudder, source, built = sys.argv[1], sys.argv[2], set(sys.argv[3:])
listing = json.loads(subprocess.run([rudder, "plugins", "--json"], check=True, capture_output=True, text=True).stdout)
library_of = {c["id"]: os.path.basename(c["file"]) for c in listing["controllers"]}
with open(os.path.join(source, "scripts", "demo.sh"), encoding="utf-8") as f:
    script = f.read()
# demo.sh names some recipes through its loop's variable: `for family in discrete continuous; do`.
loop = re.search(r"for family in ([^;]+);", script)
families = loop.group(1).split() if loop else []
recipes = sorted({r.replace("$family", family)
                  for r in re.findall(r"examples/recipes/[A-Za-z0-9_$]+\.json", script)
                  for family in (families if "$family" in r else [""])})
if len(recipes) < 4:
    sys.exit(f"FAIL: found only {recipes} in scripts/demo.sh")
missing = []
for recipe in recipes:
    with open(os.path.join(source, recipe), encoding="utf-8") as f:
        for controller in json.load(f).get("controllers", []):
            plugin = controller["plugin"]
            if library_of.get(plugin) not in built:
                missing.append(f"{recipe}: plugin '{plugin}' ({library_of.get(plugin, 'not found')})")
if missing:
    sys.exit("FAIL: make demo (target rudder_demo, libraries " + ", ".join(sorted(built)) +
             ") does not build what the demo runs:\n  " + "\n  ".join(missing))
print(f"ok: {len(recipes)} demo recipes, their plugins all in {sorted(built)}")
