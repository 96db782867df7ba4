#!/usr/bin/python3
"""serve.openai: writes the LLaDA- and Dream-shaped chat checkpoints (openai_fixture.py), then runs OpenAI's official
JavaScript client against rudder serve (openai_client_test.mjs). Exit 77 (skip), saying why, without PyTorch, node,
or the npm packages (the fixtures text.bpe.fetch_reference and serve.openai.fetch install them).
usage: openai_test.py RUDDER BUILD_DIR REPO_DIR"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile


def main():
    rudder, build, repo = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    here = pathlib.Path(__file__).resolve().parent
    openai = build / "tests" / "openai_npm" / "node_modules"
    references = build / "tests" / "bpe_npm" / "node_modules"
    if shutil.which("node") is None:
        print("SKIP: no node")
        sys.exit(77)
    for need in (openai / "openai" / "package.json", references / "@huggingface" / "jinja" / "package.json"):
        if not need.exists():
            print(f"SKIP: no {need} (installed from npm by the fixtures serve.openai.fetch and text.bpe.fetch_reference)")
            sys.exit(77)
    with tempfile.TemporaryDirectory() as folder:
        made = subprocess.run([sys.executable, str(here / "openai_fixture.py"), folder, str(references)])
        if made.returncode != 0:
            sys.exit(made.returncode)
        run = subprocess.run(["node", str(here / "openai_client_test.mjs"), rudder, str(openai), str(references),
                              folder, str(repo / "models")], env=dict(os.environ, RUDDER_ISOLATION="in_process"))
        sys.exit(run.returncode)


if __name__ == "__main__":
    main()
