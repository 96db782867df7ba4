"""Rudder on Dask: bulk generation and evaluations spread over the workers of a Dask cluster.

    from distributed import Client
    import rudder.dask

    client = Client("tcp://scheduler:8786")
    # One generation per target, each with its own seed, samples and controller params; results in target order.
    results = rudder.dask.generate("examples/recipes/length_span_discrete.json",
                                   [{"seed": i, "samples": 2, "params": {"length": {"tokens": 8 + i % 4}}} for i in range(100)],
                                   client)
    # An eval suite, shard k of n on a worker (`rudder eval --shard k/n`), merged here as one run would write it.
    rudder.dask.evaluate("examples/eval/hard_constraints.json", client, out="hard_constraints-results")

or from a shell: python3 -m rudder.dask eval SUITE --scheduler tcp://scheduler:8786 [-o OUT] [--only TEXT] [--targets N]
[--threads T] [--shards N] [--quiet], which `rudder eval SUITE --dask tcp://scheduler:8786` runs.

Every target runs with the seed it would have in one process, so the results are the same samples, byte for
byte, as a single-process run's. Workers need Rudder installed where they run (librudder.so for generate, found as
the binding finds it; the `rudder` command for evaluate, from $RUDDER_BIN, the PATH, or this checkout's build/).
Each worker process keeps the last 8 generators it made, so a recipe's model and controllers load once per worker.
"""

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

__all__ = ["generate", "evaluate", "main"]

RecipeLike = Union[str, os.PathLike, Dict[str, Any]]


def _recipe_dict(recipe: RecipeLike) -> (Dict[str, Any], Optional[str]):
    """The recipe as a dict, and the folder its relative paths resolve against (a file's folder)."""
    import rudder
    if isinstance(recipe, dict):
        return copy.deepcopy(recipe), None
    text, path = rudder._recipe_text_or_path(recipe)  # the binding's reading of a recipe argument
    if text is not None:
        try:
            parsed = json.loads(text)
        except ValueError as e:
            raise ValueError(f"recipe: not valid JSON: {e}") from None
    else:
        path = os.path.abspath(os.fsdecode(path))
        with open(path) as f:
            parsed = json.load(f)
    if not isinstance(parsed, dict):
        raise ValueError(f"recipe: expected a JSON object, got {type(parsed).__name__}")
    return parsed, os.path.dirname(path) if text is None else None


def _with_params(recipe: Dict[str, Any], params: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """The recipe with `params` merged over the params of the controller of that name (or plugin)."""
    out = copy.deepcopy(recipe)
    for name, values in params.items():
        matches = [c for c in out.get("controllers", []) if c.get("name", c.get("plugin")) == name]
        if not matches:
            raise ValueError(f"the recipe has no controller named '{name}'")
        for c in matches:
            c.setdefault("params", {}).update(values)
    return out


# Generators made in this (worker) process, by recipe, the least recently used dropped beyond _KEPT_GENERATORS: a
# recipe's model and controllers load once per worker, and targets that each differ in params do not pile up.
_KEPT_GENERATORS = 8
_generators: "OrderedDict[str, Any]" = OrderedDict()
_generators_lock = threading.Lock()


def _generate_chunk(recipe: Dict[str, Any], base_dir: Optional[str], targets: List[Dict[str, Any]]):
    import rudder  # on the worker
    results = []
    for target in targets:
        recipe_text = json.dumps(_with_params(recipe, target.get("params", {})), sort_keys=True)
        key = (base_dir or "") + "\n" + recipe_text
        with _generators_lock:
            generator = _generators.get(key)
            if generator is None:
                generator = _generators[key] = rudder.Generator(recipe_text, base_dir=base_dir)
                while len(_generators) > _KEPT_GENERATORS:
                    _generators.popitem(last=False)
            _generators.move_to_end(key)
        results.append(generator.generate(samples=target.get("samples"), seed=target.get("seed")))
    return results


def generate(recipe: RecipeLike, targets: Sequence[Dict[str, Any]], client, *, chunk: Optional[int] = None):
    """One generation per target over the client's workers; returns, in target order, each target's samples
    (lists of rudder.Sample). A target is a dict with any of "seed" and "samples" (the recipe's when missing) and
    "params" ({controller name: params merged over the recipe's}). `chunk` targets go to a worker at a time
    (default: the targets spread evenly, four chunks per worker thread)."""
    recipe, base_dir = _recipe_dict(recipe)
    targets = list(targets)
    for i, target in enumerate(targets):
        if not isinstance(target, dict):
            raise ValueError(f"target {i}: expected a dict with any of seed, samples, params, got "
                             f"{type(target).__name__}")
        unknown = set(target) - {"seed", "samples", "params"}
        if unknown:
            raise ValueError(f"target {i}: unknown keys {sorted(unknown)} (seed, samples, params)")
        for key in ("seed", "samples"):
            if key in target and target[key] is not None and (not isinstance(target[key], int) or
                                                              isinstance(target[key], bool)):
                raise ValueError(f"target {i}: '{key}' must be an integer, got {target[key]!r}")
        params = target.get("params", {})
        if not isinstance(params, dict) or not all(isinstance(v, dict) for v in params.values()):
            raise ValueError(f"target {i}: 'params' must map controller names to dicts of params, got {params!r}")
        _with_params(recipe, target.get("params", {}))  # a bad controller name fails here, not on a worker
    if not targets:
        return []
    if chunk is None:
        threads = sum(client.nthreads().values()) or 1
        chunk = max(1, -(-len(targets) // (4 * threads)))
    futures = [client.submit(_generate_chunk, recipe, base_dir, targets[i:i + chunk], pure=False)
               for i in range(0, len(targets), chunk)]
    return [samples for part in client.gather(futures) for samples in part]


def _rudder_bin(explicit: Optional[str] = None) -> str:
    up = [os.path.abspath(__file__)]
    for _ in range(5):
        up.append(os.path.dirname(up[-1]))
    # This checkout's build (<repo>/python/rudder/dask.py), or the installed prefix's (<prefix>/<libdir>/rudder/python/rudder).
    candidates = [explicit, os.environ.get("RUDDER_BIN"), shutil.which("rudder"),
                  os.path.join(up[3], "build", "bin", "rudder"), os.path.join(up[5], "bin", "rudder")]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    raise FileNotFoundError("no `rudder` command: set RUDDER_BIN, put it on the PATH, or build this checkout")


def _eval_shard(suite: str, shard: str, options: List[str], rudder_bin: Optional[str]) -> str:
    """On a worker: `rudder eval SUITE --shard K/N` into a scratch folder; returns its shard.jsonl text."""
    with tempfile.TemporaryDirectory(prefix="rudder-shard-") as out:
        run = subprocess.run([_rudder_bin(rudder_bin), "eval", suite, "--shard", shard, "-o", out, "-q", *options],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"rudder eval --shard {shard} failed ({run.returncode}): {run.stderr.strip()}")
        with open(os.path.join(out, "shard.jsonl")) as f:
            return f.read()


def evaluate(suite: Union[str, os.PathLike], client, *, out: Optional[str] = None, only: Optional[str] = None,
             targets: Optional[int] = None, threads: int = 1, shards: Optional[int] = None,
             rudder_bin: Optional[str] = None, progress: Optional[Callable[[int, int], None]] = None) -> str:
    """`rudder eval SUITE` with its targets spread over the client's workers: shard k of n (targets k, k+n, ...)
    runs as `rudder eval --shard k/n` on a worker, its outcomes come back through Dask, and `rudder eval --merge`
    writes OUT (results.json, results.md, samples/) here as one run would. Returns the results table (markdown).
    `shards` defaults to the workers' threads; `threads` is each shard's --threads; `progress(done, shards)` is
    called as shards finish."""
    suite = os.path.abspath(os.fspath(suite))
    if shards is None:
        shards = sum(client.nthreads().values()) or 1
    options = ["--threads", str(threads)]
    if only:
        options += ["--only", only]
    if targets:
        options += ["--targets", str(targets)]
    futures = [client.submit(_eval_shard, suite, f"{k}/{shards}", options, rudder_bin, pure=False) for k in range(shards)]
    if progress is not None:
        from distributed import as_completed
        progress(0, shards)
        for done, _ in enumerate(as_completed(futures), 1):
            progress(done, shards)
    texts = client.gather(futures)
    out = out or os.path.splitext(os.path.basename(suite))[0] + "-results"
    with tempfile.TemporaryDirectory(prefix="rudder-merge-") as scratch:
        dirs = []
        for k, text in enumerate(texts):
            d = os.path.join(scratch, f"shard-{k}")
            os.makedirs(d)
            with open(os.path.join(d, "shard.jsonl"), "w") as f:
                f.write(text)
            dirs.append(d)
        merge = [_rudder_bin(rudder_bin), "eval", suite, "-q", "-o", out, "--merge", *dirs]
        if only:
            merge += ["--only", only]
        run = subprocess.run(merge, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"rudder eval --merge failed ({run.returncode}): {run.stderr.strip()}")
        return run.stdout


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m rudder.dask", description="Rudder on a Dask cluster")
    sub = ap.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("eval", help="rudder eval SUITE, its targets spread over the cluster's workers")
    ev.add_argument("suite")
    ev.add_argument("--scheduler", required=True, help="the Dask scheduler's address (tcp://host:8786)")
    ev.add_argument("-o", "--out", help="folder for results.json, results.md and samples/ (default <suite>-results)")
    ev.add_argument("--only", help="only the tasks whose name contains this text")
    ev.add_argument("--targets", type=int, help="at most this many targets per task")
    ev.add_argument("--threads", type=int, default=1, help="compute threads of each shard (default 1)")
    ev.add_argument("--shards", type=int, help="shards (default: the workers' threads)")
    ev.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    args = ap.parse_args(argv)
    try:
        from distributed import Client
    except ImportError as e:
        print(f"rudder.dask: Dask's distributed is not importable by {sys.executable} ({e}); Debian's python3-distributed "
              "provides it (RUDDER_PYTHON picks the Python that `rudder eval --dask` runs)", file=sys.stderr)
        return 2
    from rudder.dask import evaluate as evaluate_here  # by module name, so the workers unpickle rudder.dask's functions

    def progress(done: int, shards: int) -> None:
        print(f"\r[dask] {done}/{shards} shards done", end="\n" if done == shards else "", file=sys.stderr, flush=True)

    try:
        client = Client(args.scheduler, timeout="10s")
    except (OSError, TimeoutError) as e:
        print(f"rudder.dask: no Dask scheduler answers at {args.scheduler} ({e})", file=sys.stderr)
        return 1
    with client:
        try:
            table = evaluate_here(args.suite, client, out=args.out, only=args.only, targets=args.targets,
                                  threads=args.threads, shards=args.shards, progress=None if args.quiet else progress)
        except RuntimeError as e:
            print(f"rudder.dask: {e}", file=sys.stderr)
            return 1
    print(table, end="")
    if not args.quiet:
        out = args.out or os.path.splitext(os.path.basename(args.suite))[0] + "-results"
        print(f"results in {out} (results.json, results.md, samples/)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
