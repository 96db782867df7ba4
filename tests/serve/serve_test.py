"""rudder serve on loopback, one case per run: python3 serve_test.py RUDDER CASE.

Each case starts its own server on a free port (--port 0, read from its first line on stderr) with the bundled
models and first-party plugins, talks to it over HTTP with the standard library only, and stops it.
"""
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

RUDDER = sys.argv[1]
CASE = sys.argv[2]

# A discrete recipe that is quick, and a continuous one that runs long enough to be caught in the middle.
QUICK = {"model": "e2e-discrete", "sampler": {"name": "analytic", "steps": 20}, "samples": 2,
         "controllers": [{"plugin": "length", "params": {"tokens": 8}}]}
LONG = {"model": "e2e-continuous", "sampler": {"name": "ddpm", "steps": 1000}, "samples": 4}


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


class Server:
    def __init__(self, *args):
        self.proc = subprocess.Popen([RUDDER, "serve", "--port", "0", "--threads", "1", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        if "listening on http://127.0.0.1:" not in line:
            fail("no listening line: " + line + self.proc.stderr.read())
        self.port = int(line.split("127.0.0.1:")[1].split()[0])
        self.log = []
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()

    def connection(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, raw=None):
        c = self.connection()
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        return r.status, dict(r.getheaders()), text

    def json(self, method, path, body=None, raw=None):
        status, headers, text = self.request(method, path, body, raw)
        try:
            return status, headers, json.loads(text)
        except ValueError:
            fail(f"{method} {path}: not JSON ({status}): {text[:300]}")

    def open_stream(self, body):
        c = self.connection()
        c.request("POST", "/v1/generate", body=json.dumps(dict(body, stream=True)))
        r = c.getresponse()
        if r.status != 200 or not r.getheader("Content-Type", "").startswith("text/event-stream"):
            fail(f"stream: {r.status} {r.getheaders()}")
        return c, r

    def metric(self, name):
        _, _, text = self.request("GET", "/metrics")
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))

    def settled_metric(self, name, want, timeout=10):
        """The metric once it equals `want` (or after `timeout` s). A request is counted once its response is
        complete, by the server's logger, which may run after the client has read the last byte; a cancelled run
        gives its turn back a step or two after its client is gone."""
        deadline = time.monotonic() + timeout
        while (value := self.metric(name)) != want and time.monotonic() < deadline:
            time.sleep(0.05)
        return value

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=120)


def events(response):
    """Server-Sent Events from a response, as (event, data) pairs, as they arrive."""
    event = None
    for raw in response:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            event = line[len("event: "):]
        elif line.startswith("data: "):
            yield event, json.loads(line[len("data: "):])


def case_endpoints():
    with tempfile.TemporaryDirectory() as d:
        named = os.path.join(d, "quick.json")
        json.dump(QUICK, open(named, "w"))
        s = Server("--recipe", "quick=" + named)
        try:
            status, _, body = s.json("GET", "/healthz")
            assert status == 200 and body == {"status": "ok"}, body
            status, _, body = s.json("GET", "/v1/models")
            assert status == 200 and "e2e-discrete" in [m["id"] for m in body["data"]], body
            status, _, body = s.json("GET", "/v1/plugins")
            by_id = {c["id"]: c for c in body["controllers"]}
            assert status == 200 and by_id["length"]["params_schema"]["properties"]["tokens"], by_id.get("length")
            assert "logit_delta" in by_id["cfg"]["capabilities"], by_id["cfg"]

            # Generate: the samples as `rudder generate` writes them, the request's overrides applied.
            status, _, body = s.json("POST", "/v1/generate", {"recipe": QUICK, "seed": 5})
            assert status == 200 and len(body["samples"]) == 2, body
            for sample in body["samples"]:
                assert sample["controls"]["length"] == {"satisfied": True, "score": 8.0}, sample
            status, _, again = s.json("POST", "/v1/generate", {"recipe": QUICK, "seed": 5})
            assert again == body, "the same seed gave other samples"
            status, _, body = s.json("POST", "/v1/generate",
                                     {"recipe": "quick", "samples": 3, "params": {"length": {"tokens": 6}}})
            assert status == 200 and len(body["samples"]) == 3, body
            assert all(x["controls"]["length"]["score"] == 6.0 for x in body["samples"]), body

            # Validate: the recipe's problems with pointers into the request, as `rudder validate` finds them.
            status, _, body = s.json("POST", "/v1/validate", {"recipe": QUICK})
            assert status == 200 and body["valid"] and body["model"] == "e2e-discrete", body
            bad = dict(QUICK, controllers=[{"plugin": "lenght"}], sampler={"name": "ddim"})
            status, _, body = s.json("POST", "/v1/validate", {"recipe": bad})
            pointers = {i["pointer"]: i["message"] for i in body["issues"]}
            assert status == 400 and not body["valid"], body
            assert "did you mean 'length'" in pointers["/recipe/controllers/0/plugin"], pointers
            assert "/recipe/sampler/name" in pointers, pointers

            # Streamed: an event per reverse step with the current texts, then the samples and "done".
            c, r = s.open_stream({"recipe": QUICK})
            seen = list(events(r))
            c.close()
            steps = [d for e, d in seen if e == "step"]
            assert len(steps) == 20 and [d["step"] for d in steps] == list(range(1, 21)), steps[:3]
            assert all(len(d["texts"]) == 2 for d in steps) and steps[-1]["t"] == 0.0, steps[-1]
            samples = [d for e, d in seen if e == "sample"]
            assert len(samples) == 2 and all(x["controls"]["length"]["satisfied"] for x in samples), samples
            assert seen[-1][0] == "done", seen[-1]

            # A request is counted once its response is complete: for the stream, after its last chunk.
            assert s.settled_metric('rudder_http_requests_total{code="200",path="/v1/generate"}', 4) == 4
            metrics = s.request("GET", "/metrics")[2]
            assert s.metric("rudder_samples_total") == 2 + 2 + 3 + 2, metrics
            assert s.metric("rudder_reverse_steps_total") >= 80, metrics
        finally:
            code = s.stop()
        assert code == 0, f"exit {code}: {''.join(s.log)}"


def case_bad_requests():
    s = Server("--max-body", "4096")
    try:
        for raw, want_status, want in [
            ("{not json", 400, "not valid JSON"),
            ("[1, 2]", 400, "must be a JSON object"),
            (json.dumps({"recipe": QUICK, "seed": -1, "colour": 1}), 400, "/colour"),
            (json.dumps({"recipe": "nothing"}), 400, "no recipe named 'nothing' on this server (it was started with none)"),
            (json.dumps({"recipe": QUICK, "params": {"span": {"prefix": "The"}}}), 400, "no controller named 'span'"),
            (json.dumps({"recipe": dict(QUICK, batch_size=0)}), 400, "/recipe/batch_size"),
            (json.dumps({"recipe": dict(QUICK, model="nowhere")}), 400, "/recipe/model"),
            # Params for a controller whose plugin is not a name: a bad request, not the server's failure.
            (json.dumps({"recipe": dict(QUICK, controllers=[{"plugin": 5}]), "params": {"length": {"tokens": 4}}}), 400,
             "no controller named 'length'"),
        ]:
            status, _, text = s.request("POST", "/v1/generate", raw=raw)
            assert status == want_status and want in text, (raw, status, text)
            assert "error" in json.loads(text), text
        status, _, text = s.request("POST", "/v1/generate", raw=json.dumps({"recipe": QUICK, "pad": "x" * 5000}))
        assert status == 413, (status, text)
        status, _, body = s.json("GET", "/no/such/path")
        assert status == 404 and "error" in body, body
        # Hard constraints that cannot hold together: found before sampling (400 at both controllers, in words), never
        # a run that fails half way; the server goes on.
        failing = dict(QUICK, controllers=[{"plugin": "span", "params": {"prefix": "The", "suffix": ".", "length": 8}},
                                           {"plugin": "length", "params": {"tokens": 5}}])
        status, _, body = s.json("POST", "/v1/generate", {"recipe": failing})
        assert status == 400 and sorted(i["pointer"] for i in body["issues"]) == ["/recipe/controllers/0",
                                                                         "/recipe/controllers/1"], body
        assert "'span' and 'length' fix different tokens at position 7: \".\" and the end of the text" \
            in body["issues"][0]["message"], body
        status, _, body = s.json("POST", "/v1/validate", {"recipe": failing})
        assert status == 400 and not body["valid"] and len(body["issues"]) == 2, body
        assert s.json("POST", "/v1/generate", {"recipe": QUICK})[0] == 200
        assert s.metric('rudder_generation_failures_total{cause="invalid request"}') == 9
        assert s.metric('rudder_generation_failures_total{cause="run error"}') == 0
        assert s.settled_metric('rudder_http_requests_total{code="404",path="other"}', 1) == 1
    finally:
        code = s.stop()
    assert code == 0, f"exit {code}: {''.join(s.log)}"


def case_queue_and_disconnect():
    # One at a time and nobody waiting: a second request while one runs is refused with 503 and Retry-After.
    s = Server("--parallel", "1", "--queue", "0")
    try:
        c, r = s.open_stream({"recipe": LONG})
        stream = events(r)
        first = next(stream)
        assert first[0] == "step", first
        status, headers, body = s.json("POST", "/v1/generate", {"recipe": QUICK})
        assert status == 503 and headers.get("Retry-After") == "5" and "queue is full" in body["error"], (status, headers, body)
        # The client goes away: the run is cancelled within a step or two and the turn is free again.
        c.close()
        assert s.settled_metric('rudder_generation_failures_total{cause="disconnected"}', 1, timeout=30) == 1, s.request("GET", "/metrics")[2]
        assert s.settled_metric("rudder_generations_running", 0) == 0, s.request("GET", "/metrics")[2]
        steps_then = s.metric("rudder_reverse_steps_total")
        assert steps_then < 4 * 100, f"{steps_then} steps ran after the client left"
        status, _, body = s.json("POST", "/v1/generate", {"recipe": QUICK})
        assert status == 200, body
        assert s.metric("rudder_queue_length") == 0 and s.metric("rudder_generations_running") == 0
        # Every admitted request was lined up or left: none is counted as still loading its recipe.
        assert "\nrudder_generations_preparing 0\n" in s.request("GET", "/metrics")[2], s.request("GET", "/metrics")[2]
    finally:
        code = s.stop()
    assert code == 0, f"exit {code}: {''.join(s.log)}"


def case_batching():
    # Requests of one recipe without a fixed seed that wait together are served by one run: each gets its own rows
    # (re-indexed from 0), and the run's seed and rows reproduce them exactly. Seeded requests run alone, and so do
    # requests of the discrete analytic sampler (its runs do not batch well); the generators stay loaded between
    # requests.
    shared = dict(QUICK, sampler={"name": "confidence", "steps": 20})
    s = Server("--parallel", "1", "--queue", "8")
    try:
        def wait_for(name, value):
            assert s.settled_metric(name, value, timeout=60) == value, (name, s.request("GET", "/metrics")[2])

        def block():
            c, r = s.open_stream({"recipe": LONG})
            stream = events(r)
            assert next(stream)[0] == "step"
            return c

        def in_thread(body, out, key):
            t = threading.Thread(target=lambda: out.__setitem__(key, s.json("POST", "/v1/generate", body)))
            t.start()
            return t

        blocker = block()
        answers, threads = {}, []
        for i, n in enumerate([2, 1, 3]):
            threads.append(in_thread({"recipe": shared, "samples": n}, answers, i))
            wait_for("rudder_queue_length", i + 1)  # in this order in the queue
        streamed = []
        c, r = s.open_stream({"recipe": shared, "samples": 2})
        reader = threading.Thread(target=lambda: streamed.extend(events(r)))
        reader.start()
        wait_for("rudder_queue_length", 4)
        blocker.close()  # the long run is cancelled; the worker takes the four waiting requests as one run
        for t in threads + [reader]:
            t.join(timeout=120)
        c.close()
        runs = []
        for i, n in enumerate([2, 1, 3]):
            status, _, body = answers[i]
            assert status == 200 and len(body["samples"]) == n, body
            assert [x["index"] for x in body["samples"]] == list(range(n)), body
            assert all(x["controls"]["length"]["satisfied"] for x in body["samples"]), body
            runs.append(body["run"])
        done = [d for e, d in streamed if e == "done"]
        assert done, streamed[-3:]
        runs.append(done[0]["run"])
        # Each request's rows, in the order the requests reached the queue: together, the run's 8 rows.
        sizes = [2, 1, 3, 2]
        tiles = sorted((x["first"], n) for x, n in zip(runs, sizes))
        assert [f for f, _ in tiles] == [sum(n for _, n in tiles[:k]) for k in range(4)], runs
        assert all(x["requests"] == 4 and x["samples"] == 8 and x["seed"] == runs[0]["seed"] for x in runs), runs
        steps = [d for e, d in streamed if e == "step"]
        assert len(steps) == 20 and all(len(d["texts"]) == 2 and d["first"] == 0 for d in steps), steps[:2]
        stream_samples = [d for e, d in streamed if e == "sample"]
        assert [x["index"] for x in stream_samples] == [0, 1], stream_samples
        assert s.metric("rudder_runs_total") == 2, s.request("GET", "/metrics")[2]

        # The run's seed and rows give the same samples from a run alone (a fixed seed: not shared).
        loads = s.metric("rudder_generator_loads_total")
        status, _, alone = s.json("POST", "/v1/generate", {"recipe": shared, "samples": 8, "seed": runs[0]["seed"]})
        assert status == 200 and alone["run"] == {"seed": runs[0]["seed"], "samples": 8, "requests": 1, "first": 0}, alone
        texts = [x["text"] for x in alone["samples"]]
        answered = [[x["text"] for x in answers[i][2]["samples"]] for i in range(3)] + [[x["text"] for x in stream_samples]]
        for run, got in zip(runs, answered):
            assert got == texts[run["first"]:run["first"] + len(got)], (run, got, texts)
        assert s.metric("rudder_generator_loads_total") == loads, "a cached generator of the recipe was not reused"

        # Seeded requests that wait together still run one by one, each with its own seed; so do unseeded ones of
        # the analytic sampler.
        blocker = block()
        answers, threads = {}, []
        for i, body in enumerate([{"recipe": shared, "seed": 11}, {"recipe": shared, "seed": 12}, {"recipe": QUICK}, {"recipe": QUICK}]):
            threads.append(in_thread(body, answers, i))
        wait_for("rudder_queue_length", 4)
        blocker.close()
        for t in threads:
            t.join(timeout=120)
        assert [answers[i][2]["run"] for i in range(2)] == [
            {"seed": 11 + i, "samples": 2, "requests": 1, "first": 0} for i in range(2)], answers
        assert all(answers[i][2]["run"]["requests"] == 1 for i in (2, 3)), answers
        assert s.metric("rudder_runs_total") == 2 + 1 + 1 + 4
    finally:
        code = s.stop()
    assert code == 0, f"exit {code}: {''.join(s.log)}"


def case_left_queue():
    # A request whose recipe was loaded to check it, and whose time runs out while it waits, leaves that generator
    # in the cache: the next request of its recipe does not load it again.
    long = dict(LONG, sampler={"name": "ddpm", "steps": 2000})
    s = Server("--parallel", "1", "--queue", "8", "--timeout", "3")
    try:
        answers, threads = {}, []

        def send(key, body, metric, value):
            def answer():
                answers[key] = s.json("POST", "/v1/generate", body)
            threads.append(threading.Thread(target=answer))
            threads[-1].start()
            assert s.settled_metric(metric, value, timeout=60) == value, (key, s.request("GET", "/metrics")[2])

        send("blocker", {"recipe": long, "seed": 1}, "rudder_generations_running", 1)  # alone, until its time is up
        send("first", {"recipe": long}, "rudder_queue_length", 1)
        send("quick", {"recipe": QUICK}, "rudder_queue_length", 2)  # loaded to check it, then in line
        time.sleep(1)
        # Shares the next run with "first", which goes on until this one's time is up, a second after "quick"'s.
        send("last", {"recipe": long}, "rudder_queue_length", 3)
        for t in threads:
            t.join(timeout=120)
        # "first" and "last" may run out of time while their run loads the generator the blocker's cancelled run
        # gave up (a sanitized build loads slowly): a timeout all the same.
        assert all(answers[key][0] == 504 for key in ("blocker", "first", "quick", "last")), answers
        assert s.metric('rudder_generation_failures_total{cause="timeout"}') == 4, s.request("GET", "/metrics")[2]
        # A load whose request left goes on in the background (and is counted when it ends).
        assert s.settled_metric("rudder_generator_loads_in_progress", 0, timeout=120) == 0
        loads = s.metric("rudder_generator_loads_total")
        assert s.json("POST", "/v1/generate", {"recipe": QUICK})[0] == 200
        assert s.metric("rudder_generator_loads_total") == loads, \
            "the generator of the request that left was loaded again"
    finally:
        code = s.stop()
    assert code == 0, f"exit {code}: {''.join(s.log)}"


def case_timeout():
    s = Server("--timeout", "0.5")
    try:
        status, _, body = s.json("POST", "/v1/generate", {"recipe": LONG})
        assert status == 504 and "limit of 0.5" in body["error"], (status, body)
        c, r = s.open_stream({"recipe": LONG})
        seen = list(events(r))
        c.close()
        assert seen[-1][0] == "error" and "limit of 0.5" in seen[-1][1]["error"], seen[-1]
        assert s.metric('rudder_generation_failures_total{cause="timeout"}') == 2
    finally:
        code = s.stop()
    assert code == 0, f"exit {code}: {''.join(s.log)}"


def case_sigterm_drain():
    # SIGTERM while a generation runs: readiness fails, new work is refused, the running one finishes, then exit 0.
    s = Server()
    c, r = s.open_stream({"recipe": dict(LONG, sampler={"name": "ddpm", "steps": 300}, samples=2)})
    stream = events(r)
    assert next(stream)[0] == "step"
    s.proc.send_signal(signal.SIGTERM)
    deadline = time.time() + 10
    while time.time() < deadline and s.json("GET", "/healthz")[0] != 503:
        time.sleep(0.05)
    status, _, body = s.json("GET", "/healthz")
    assert status == 503 and body == {"status": "draining"}, (status, body)
    status, headers, body = s.json("POST", "/v1/generate", {"recipe": QUICK})
    assert status == 503 and "shutting down" in body["error"] and "Retry-After" in headers, (status, body)
    rest = list(stream)
    c.close()
    assert [e for e, _ in rest if e == "sample"] == ["sample", "sample"] and rest[-1][0] == "done", rest[-3:]
    code = s.proc.wait(timeout=60)
    assert code == 0, f"exit {code}: {''.join(s.log)}"
    assert any("stopping" in line for line in s.log), s.log


def case_response_format():
    # OpenAI's response_format adds a json_schema controller; its values are checked at their pointers. The E2E word
    # vocabulary cannot spell JSON, which is the recipe's 400 (the served positive case is in tests/structured).
    s = Server()
    try:
        for body, want in [
            ({"recipe": QUICK, "response_format": {"type": "json_object"}},
             "/recipe/controllers/1/params"),  # after the recipe's length controller
            ({"recipe": QUICK, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}},
             "cannot spell any text that is JSON valid against the schema"),
            ({"recipe": QUICK, "response_format": {"type": "xml"}}, "/response_format/type"),
            ({"recipe": QUICK, "response_format": {"type": "json_schema"}}, "/response_format/json_schema"),
            ({"recipe": QUICK, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
             "/response_format/json_schema/schema"),
            ({"recipe": QUICK, "response_format": {"type": "json_schema", "json_schema": {"schema": {}, "size": 1}}},
             "/response_format/json_schema/size"),
            ({"recipe": QUICK, "response_format": "json"}, "/response_format"),
        ]:
            status, _, text = s.request("POST", "/v1/generate", body)
            assert status == 400 and want in text, (body, status, text)
        status, _, body = s.json("POST", "/v1/generate", {"recipe": QUICK, "response_format": {"type": "text"}})
        assert status == 200 and len(body["samples"]) == 2, (status, body)
    finally:
        code = s.stop()
    assert code == 0, f"exit {code}: {''.join(s.log)}"


def case_openai_fields():
    # Issue 63: fields OpenAI's own servers accept and ignore for a model like these are accepted and ignored here
    # (metadata, modalities ["text"]); those they refuse for it are refused with the reason (reasoning_effort, audio).
    s = Server()
    try:
        chat = {"model": "e2e-mdlm", "max_tokens": 6, "seed": 1, "messages": [{"role": "user", "content": "hello"}]}
        status, _, plain = s.json("POST", "/v1/chat/completions", chat)
        assert status == 200, plain
        status, _, body = s.json("POST", "/v1/chat/completions",
                                 dict(chat, metadata={"user_id": "u1", "trace": "x" * 512}, modalities=["text"]))
        assert status == 200 and body["choices"] == plain["choices"], (status, body)
        for extra, pointer in (({"metadata": {"k": 1}}, "/metadata"), ({"metadata": {"k": "x" * 513}}, "/metadata"),
                               ({"modalities": ["text", "audio"]}, "/modalities"),
                               ({"reasoning_effort": "low"}, "/reasoning_effort")):
            status, _, body = s.json("POST", "/v1/chat/completions", dict(chat, **extra))
            assert status == 400 and body["error"]["param"] == pointer.lstrip("/"), (extra, status, body)
    finally:
        code = s.stop()
    assert code == 0, f"exit {code}: {''.join(s.log)}"


if __name__ == "__main__":  # nginx_test.py imports the helpers
    {"endpoints": case_endpoints, "bad_requests": case_bad_requests, "batching": case_batching,
     "queue_and_disconnect": case_queue_and_disconnect, "left_queue": case_left_queue, "timeout": case_timeout,
     "sigterm_drain": case_sigterm_drain, "response_format": case_response_format,
     "openai_fields": case_openai_fields}[CASE]()
    print("ok:", CASE)
