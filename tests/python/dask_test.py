"""rudder.dask on a Dask scheduler with two worker processes on loopback: bulk generation and a sharded eval give
the samples a single process gives, byte for byte. Exits 77 (skipped), saying why, without python3-distributed.

    python3 dask_test.py RUDDER REPO
"""
import json
import os
import subprocess
import sys
import tempfile

RUDDER, REPO = sys.argv[1], sys.argv[2]
try:
    from distributed import Client, LocalCluster
except ImportError as e:
    print(f"SKIP: Dask's distributed is not importable ({e}); Debian's python3-distributed provides it")
    sys.exit(77)
import rudder
import rudder.dask


def main():
    os.environ["RUDDER_BIN"] = RUDDER  # the workers' `rudder` (they inherit this environment)
    recipe = os.path.join(REPO, "examples", "recipes", "length_span_discrete.json")
    targets = [{"seed": 3 + i, "samples": 1 + i % 2, "params": {"length": {"tokens": 7 + i % 3}}} for i in range(7)]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        assert len(client.nthreads()) == 2, client.nthreads()
        # Bulk generation: in target order, each target as one process generates it.
        spread = rudder.dask.generate(recipe, targets, client, chunk=2)
        here = [rudder.Generator(rudder.dask._with_params(json.load(open(recipe)), t["params"]), base_dir=os.path.dirname(recipe))
                .generate(samples=t["samples"], seed=t["seed"]) for t in targets]
        assert [[(s.text, s.tokens, s.controls) for s in x] for x in spread] == \
               [[(s.text, s.tokens, s.controls) for s in x] for x in here], (spread, here)
        assert [len(x) for x in spread] == [t["samples"] for t in targets]
        assert all(x.controls["length"].satisfied for part in spread for x in part)
        try:
            rudder.dask.generate(recipe, [{"params": {"lenght": {}}}], client)
            raise AssertionError("a target naming no controller of the recipe was accepted")
        except ValueError as e:
            assert "no controller named 'lenght'" in str(e), e
        # Issue 64: params=[1] raised AttributeError; each malformed target is a ValueError naming it.
        for target, words in (({"params": [1]}, "'params' must map controller names"),
                              ({"params": {"length": 3}}, "'params' must map controller names"),
                              (7, "target 0: expected a dict"), ({"seed": "1"}, "'seed' must be an integer"),
                              ({"samples": 2.5}, "'samples' must be an integer")):
            try:
                rudder.dask.generate(recipe, [target], client)
                raise AssertionError(f"target {target!r} was accepted")
            except ValueError as e:
                assert words in str(e), (target, e)
        for text in (b"[1]", "[[["):
            try:
                rudder.dask.generate(text, [{}], client)
                raise AssertionError(f"recipe {text!r} was accepted")
            except ValueError as e:
                assert "recipe:" in str(e), e

        # A sharded eval: two shards on the workers, merged here; the same samples and results as one run.
        suite = os.path.join(REPO, "examples", "eval", "hard_constraints.json")
        with tempfile.TemporaryDirectory() as d:
            table = rudder.dask.evaluate(suite, client, out=os.path.join(d, "dask"), only="discrete", targets=3, rudder_bin=RUDDER)
            assert table.count("| discrete |") == 4, table
            subprocess.run([RUDDER, "eval", suite, "--only", "discrete", "--targets", "3", "--threads", "1", "-q", "-o",
                            os.path.join(d, "one")], check=True, stdout=subprocess.DEVNULL)
            for name in sorted(os.listdir(os.path.join(d, "one", "samples"))):
                one = open(os.path.join(d, "one", "samples", name), "rb").read()
                spread = open(os.path.join(d, "dask", "samples", name), "rb").read()
                assert one == spread and one, name
            results = [json.load(open(os.path.join(d, x, "results.json"))) for x in ("one", "dask")]
            for r in results:
                for task in r["tasks"]:
                    task.pop("seconds_per_sample")
            assert results[0] == results[1], results

            # The same through the CLI: `rudder eval --dask` hands over to python3 -m rudder.dask.
            env = dict(os.environ, RUDDER_PYTHON=sys.executable)
            env.pop("RUDDER_BIN")
            env.pop("RUDDER_LIBRARY", None)  # the package beside the executable finds its library by itself
            run = subprocess.run([RUDDER, "eval", suite, "--dask", cluster.scheduler_address, "--only", "discrete",
                                  "--targets", "3", "-o", os.path.join(d, "cli")], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            assert run.returncode == 0, run.stderr
            assert run.stdout.count("| discrete |") == 4, run.stdout  # the table (its s/sample column is timing)
            cli = json.load(open(os.path.join(d, "cli", "results.json")))
            for task in cli["tasks"]:
                task.pop("seconds_per_sample")
            assert cli == results[1], (cli, results[1])
            assert "2/2 shards done" in run.stderr and "results in" in run.stderr, run.stderr
            for name in sorted(os.listdir(os.path.join(d, "one", "samples"))):
                assert open(os.path.join(d, "one", "samples", name), "rb").read() == \
                       open(os.path.join(d, "cli", "samples", name), "rb").read(), name
            # Clear errors: no scheduler there, no Python there, a Python without Dask, and --dask with --shard.
            run = subprocess.run([RUDDER, "eval", suite, "--dask", "tcp://127.0.0.1:9", "-q", "-o", os.path.join(d, "x")],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert run.returncode == 1 and "no Dask scheduler answers at tcp://127.0.0.1:9" in run.stderr, run.stderr
            run = subprocess.run([RUDDER, "eval", suite, "--dask", cluster.scheduler_address, "-q"],
                                 env=dict(env, RUDDER_PYTHON="/nonexistent/python3"), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            assert run.returncode != 0 and "cannot run /nonexistent/python3" in run.stderr, run.stderr
            os.makedirs(os.path.join(d, "no_dask", "distributed"))
            with open(os.path.join(d, "no_dask", "distributed", "__init__.py"), "w") as f:
                f.write("raise ImportError('hidden by the test')\n")
            run = subprocess.run([RUDDER, "eval", suite, "--dask", cluster.scheduler_address, "-q"],
                                 env=dict(env, PYTHONPATH=os.path.join(d, "no_dask") + ":" + env.get("PYTHONPATH", "")),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert run.returncode == 2 and "Dask's distributed is not importable" in run.stderr, run.stderr
            run = subprocess.run([RUDDER, "eval", suite, "--dask", cluster.scheduler_address, "--shard", "0/2"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert run.returncode != 0 and "excludes" in run.stderr, run.stderr
    print("ok: rudder.dask generate and evaluate on two workers, and rudder eval --dask")


if __name__ == "__main__":
    main()
