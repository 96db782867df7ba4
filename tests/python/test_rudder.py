"""The Python binding over librudder.so: generate from a recipe, verdicts, the step callback, cancelling, errors,
and generators on several Python threads. Run by ctest with RUDDER_LIBRARY and PYTHONPATH set."""
import faulthandler
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import rudder

RECIPE = {
    "model": "e2e-corpus", "family": "discrete", "sampler": {"steps": 30}, "seed": 5, "samples": 3,
    "max_length": 16,
    "controllers": [{"plugin": "length", "params": {"tokens": 8}}, {"plugin": "span", "params": {"prefix": "The"}}],
}


class Binding(unittest.TestCase):
    def test_generate_from_a_recipe_file_with_verdicts(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "recipe.json")
            with open(path, "w") as f:
                json.dump(RECIPE, f)
            with rudder.Generator(path) as gen:
                samples = gen.generate()
        self.assertEqual(len(samples), 3)
        for s in samples:
            self.assertTrue(s.text.startswith("The "), s.text)
            self.assertEqual(len(s.tokens), 8)
            self.assertEqual(list(s.controls), ["length", "span"])
            self.assertIs(s.controls["length"].satisfied, True)
            self.assertEqual(s.controls["length"].score, 8.0)

    def test_same_seed_same_samples_and_per_call_overrides(self):
        gen = rudder.Generator(json.dumps(RECIPE))
        first = [s.text for s in gen.generate()]
        self.assertEqual([s.text for s in gen.generate()], first)
        more = gen.generate(samples=5, seed=123)
        self.assertEqual(len(more), 5)
        self.assertEqual([s.index for s in more], [0, 1, 2, 3, 4])

    def test_step_callback_sees_progress_and_texts(self):
        gen = rudder.Generator(RECIPE)
        seen = []
        samples = gen.generate(samples=2, on_step=seen.append, step_texts=True)
        self.assertEqual(len(seen), 30)  # one batch of 2, 30 steps
        self.assertEqual((seen[0].step, seen[0].steps, seen[0].batches), (1, 30, 1))
        self.assertGreater(seen[0].t, seen[-1].t)
        self.assertEqual(seen[-1].texts, [s.text for s in samples])
        without = []
        gen.generate(samples=2, on_step=without.append)
        self.assertEqual(without[0].texts, [])

    def test_returning_true_cancels_and_the_generator_stays_usable(self):
        gen = rudder.Generator(RECIPE)
        calls = []
        with self.assertRaises(rudder.Cancelled):
            gen.generate(on_step=lambda p: calls.append(p.step) or p.step == 4)
        self.assertEqual(calls, [1, 2, 3, 4])
        self.assertEqual(len(gen.generate()), 3)

    def test_ctrl_c_in_a_callback_stops_within_a_step_keeping_finished_samples(self):
        gen = rudder.Generator(dict(RECIPE, batch_size=1))  # three batches of 30 steps
        steps = []

        def press_ctrl_c(progress):
            steps.append(progress.step)
            if progress.batch == 1 and progress.step == 5:
                os.kill(os.getpid(), signal.SIGINT)

        with self.assertRaises(rudder.Interrupted) as caught:
            gen.generate(on_step=press_ctrl_c)
        self.assertIsInstance(caught.exception, KeyboardInterrupt)
        self.assertEqual([s.index for s in caught.exception.samples], [0])
        self.assertLessEqual(len(steps), 30 + 6, "the run went on after Ctrl-C")
        self.assertEqual(len(gen.generate()), 3, "the generator is usable afterwards")
        self.assertIs(signal.getsignal(signal.SIGINT), signal.default_int_handler)

    def test_ctrl_c_without_a_callback_stops_the_run(self):
        gen = rudder.Generator(dict(RECIPE, samples=400, batch_size=1))
        timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        try:
            with self.assertRaises(rudder.Interrupted) as caught:
                gen.generate()
        finally:
            timer.cancel()
        self.assertLess(len(caught.exception.samples), 400)

    @unittest.skipUnless(os.environ.get("RUDDER_TEST_FIXTURE_DIR"), "needs the fixture plugins (ctest sets the folder)")
    def test_ctrl_c_stops_a_step_blocked_in_a_controllers_process(self):
        # A controller in a process of its own hangs in its step with no time limit: Ctrl-C must still end the call
        # (it used to wait for the time limit, and for ever without one). faulthandler ends a hung test.
        fixtures = os.environ["RUDDER_TEST_FIXTURE_DIR"]
        with tempfile.TemporaryDirectory() as folder:
            marker = os.path.join(folder, "hanging")
            recipe = dict(RECIPE, controllers=RECIPE["controllers"] + [
                {"plugin": "faulty", "isolation": "process", "time_limit": 0,
                 "params": {"fault": "hang", "at_step": 3, "once": marker}}])
            gen = rudder.Generator(recipe, plugin_path=fixtures)

            def press_ctrl_c_once_it_hangs():
                while not os.path.exists(marker):
                    time.sleep(0.01)
                time.sleep(0.2)
                os.kill(os.getpid(), signal.SIGINT)

            presser = threading.Thread(target=press_ctrl_c_once_it_hangs)
            presser.start()
            faulthandler.dump_traceback_later(120, exit=True)
            try:
                with self.assertRaises(rudder.Interrupted) as caught:
                    gen.generate()
            finally:
                faulthandler.cancel_dump_traceback_later()
                presser.join()
            self.assertEqual(caught.exception.samples, [])
            self.assertEqual(len(gen.generate()), 3, "the generator is usable afterwards (a new process)")
        self.assertIs(signal.getsignal(signal.SIGINT), signal.default_int_handler)

    def test_counts_beyond_int64_are_refused_not_wrapped(self):
        gen = rudder.Generator(RECIPE)
        for samples in (2**70, 2**64, 2**63, 0, -1, 2.5):
            with self.assertRaises(rudder.Error) as caught:
                gen.generate(samples=samples)
            self.assertEqual(caught.exception.status, rudder.ERR_INVALID_ARGUMENT, samples)
        with self.assertRaises(rudder.Error):
            rudder.Generator(RECIPE, limits={"max_samples": 2**64 + 3})
        self.assertEqual(len(gen.generate(samples=2)), 2)

    def test_close_inside_a_callback_is_refused(self):
        gen = rudder.Generator(RECIPE)
        with self.assertRaises(rudder.Error) as caught:
            gen.generate(on_step=lambda p: gen.close())
        self.assertEqual(caught.exception.status, rudder.ERR_BUSY)
        self.assertEqual(len(gen.generate()), 3)
        gen.close()

    def test_a_memory_limit_refuses_a_run_estimated_over_it(self):
        with self.assertRaises(rudder.InvalidRecipe) as caught:
            rudder.Generator(dict(RECIPE, batch_size=64, samples=64), limits={"max_memory_mb": 1})
        self.assertIn("/batch_size: a batch of 64 needs about", str(caught.exception))
        self.assertIn("over the limit of 1 MB", str(caught.exception))

    def test_seeds_outside_the_recipe_range_are_refused(self):
        gen = rudder.Generator(RECIPE)
        for seed in (-1, 2**63, 2**64 + 5):
            with self.assertRaises(rudder.Error):
                gen.generate(seed=seed)
        self.assertEqual(len(gen.generate(seed=2**63 - 1)), 3)

    def test_an_exception_in_the_callback_cancels_and_is_raised(self):
        gen = rudder.Generator(RECIPE)

        def explode(progress):
            raise KeyError("from the callback")

        with self.assertRaises(KeyError):
            gen.generate(on_step=explode)

    def test_invalid_recipe_names_every_problem(self):
        bad = dict(RECIPE, sampler={"stpes": 3}, controllers=[{"plugin": "lenght"}])
        with self.assertRaises(rudder.InvalidRecipe) as caught:
            rudder.Generator(bad)
        message = str(caught.exception)
        self.assertIn("/sampler/stpes: unknown key 'stpes'; did you mean 'steps'?", message)
        self.assertIn("did you mean 'length'?", message)
        self.assertEqual(caught.exception.status, rudder.ERR_INVALID_RECIPE)
        issues = caught.exception.issues
        self.assertEqual([i.pointer for i in issues], ["/sampler/stpes", "/controllers/0/plugin"])
        self.assertEqual(issues[0].message, "unknown key 'stpes'; did you mean 'steps'?")

    def test_recipe_text_in_bytes_or_not_an_object_is_read_as_text(self):
        # Issue 64: b"{}" and "[[[..." were read as file names ("no such file").
        with self.assertRaises(rudder.InvalidRecipe) as caught:
            rudder.Generator(b"{}")
        self.assertIn("/model", str(caught.exception))
        ok = rudder.Generator(json.dumps(RECIPE).encode())
        self.assertEqual(len(ok.generate(samples=1, seed=1)), 1)
        ok.close()
        for text in ("[[[[[[", " [1, 2]", b"[", "\n{"):
            with self.assertRaises(rudder.Error) as caught:
                rudder.Generator(text)
            self.assertNotIn("no such file", str(caught.exception).lower(), text)
            self.assertNotIn("does not exist", str(caught.exception), text)
        for wrong in (42, None, ["a"], 1.5):
            with self.assertRaises(rudder.Error) as caught:
                rudder.Generator(wrong)
            self.assertIn("expected a file's path, JSON text or a dict, got " + type(wrong).__name__,
                          str(caught.exception))

    def test_errors_pickle_as_themselves(self):
        # A Dask worker's error reaches the client through pickle: the same class, status, issues and samples.
        with self.assertRaises(rudder.InvalidRecipe) as caught:
            rudder.Generator(dict(RECIPE, sampler={"steps": 0}))
        back = pickle.loads(pickle.dumps(caught.exception))
        self.assertIs(type(back), rudder.InvalidRecipe)
        self.assertEqual((back.status, str(back), back.issues),
                         (caught.exception.status, str(caught.exception), caught.exception.issues))
        samples = rudder.Generator(RECIPE).generate(samples=1)
        cancelled = pickle.loads(pickle.dumps(rudder.Cancelled(rudder.ERR_CANCELLED, "stopped", samples)))
        self.assertEqual((type(cancelled), cancelled.status, cancelled.samples[0].text),
                         (rudder.Cancelled, rudder.ERR_CANCELLED, samples[0].text))
        interrupted = pickle.loads(pickle.dumps(rudder.Interrupted(samples)))
        self.assertEqual((type(interrupted), len(interrupted.samples)), (rudder.Interrupted, 1))

    def test_a_checkout_finds_its_build_tree_library(self):
        # PYTHONPATH=python in a checkout, no RUDDER_LIBRARY: build/lib/librudder.so, which this test's build made.
        env = dict(os.environ)
        env.pop("RUDDER_LIBRARY", None)
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        expected = os.path.join(repo, "build", "lib", "librudder.so")
        if not os.path.exists(expected):  # (then the import has no library to find)
            self.skipTest(f"no {expected}: this build tree is elsewhere")
        code = "import rudder; print(rudder._find_library())"
        found = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        self.assertEqual(found.returncode, 0, found.stderr)
        self.assertEqual(found.stdout.strip(), expected)
        env["RUDDER_LIBRARY"] = "/nonexistent/librudder.so"
        broken = subprocess.run([sys.executable, "-c", "import rudder"], env=env, capture_output=True, text=True)
        self.assertNotEqual(broken.returncode, 0)
        self.assertIn("set RUDDER_LIBRARY", broken.stderr)

    def test_limits_refuse_a_recipe_that_asks_for_more(self):
        with self.assertRaises(rudder.InvalidRecipe) as caught:
            rudder.Generator(dict(RECIPE, batch_size=2), limits={"max_batch_size": 1, "max_steps": 2})
        self.assertIn("/batch_size", str(caught.exception))
        self.assertIn("/sampler/steps", str(caught.exception))
        gen = rudder.Generator(RECIPE, limits={"max_samples": RECIPE["samples"]})
        with self.assertRaises(rudder.Error):
            gen.generate(samples=RECIPE["samples"] + 1)
        with self.assertRaises(rudder.Error):
            rudder.Generator(RECIPE, limits={"max_lenght": 4})

    def test_generators_on_several_threads(self):
        recipes = [dict(RECIPE, seed=seed, family=family) for seed, family in
                   [(1, "discrete"), (2, "continuous"), (3, "discrete")]]
        sequential = [[s.text for s in rudder.Generator(r).generate()] for r in recipes]
        concurrent = [None] * len(recipes)

        def run(k):
            concurrent[k] = [s.text for s in rudder.Generator(recipes[k]).generate()]

        threads = [threading.Thread(target=run, args=(k,)) for k in range(len(recipes))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(concurrent, sequential)

    def test_compute_threads_are_a_cap(self):
        with self.assertRaisesRegex(ValueError, "max_threads must be >= 0"):
            rudder.set_compute_threads(-1)
        rudder.set_compute_threads(1)
        try:
            one = [s.text for s in rudder.Generator(RECIPE).generate(samples=2, seed=4)]
        finally:
            rudder.set_compute_threads(0)
        self.assertEqual(one, [s.text for s in rudder.Generator(RECIPE).generate(samples=2, seed=4)])

    def test_version(self):
        self.assertRegex(rudder.library_version(), r"^\d+\.\d+\.\d+$")


if __name__ == "__main__":
    unittest.main()
