"""rudder serve under a soak of mixed valid and hostile requests (issue 50): python3 soak_test.py RUDDER FIXTURES
[--seconds S] [--clients C] [--json OUT].

One server on loopback (`--isolation process`, an API key, a models folder that also holds a FIFO model and one that
links out of its folder, the fixture plugins `faulty` and `hostile` beside the bundled ones) and C client threads
(32) for S seconds (600 for `make soak`). Each client picks its next request at random: half valid (seeded
generations, streamed and not, whose samples must equal the reference answers taken before the load; unseeded ones,
which may share runs, whose samples must satisfy their control; validations; the listings and the metrics), half
hostile (paths and bodies that are not UTF-8, model paths, a FIFO model, a model linking out, a request asking for
in_process, a plugin by path, 1 MB model names, bodies over the limit (Content-Length and chunked), malformed lengths,
chat templates that overflow integers, nest 20,000 deep, recurse without end or loop 10^10 times, a schema past its
compile budget,
missing and wrong API keys, a page of another
origin, garbage request lines, a plugin that crashes its isolated process, one whose error message is not UTF-8,
slow sockets that trickle headers or a body). A prober asks /healthz every half second with a 1 s timeout.

Passes when the server stays up, every /healthz is answered within 1 s, every valid request is answered correctly,
every hostile one gets the answer it should, and the server's resident memory comes back to within 10% of its level
after the warm-up (the reference answers) once the load ends. Prints the numbers (and writes them as JSON with
--json).
"""
import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

KEY = "soak-key-" + "0123456789abcdef"
QUICK = {"model": "e2e-discrete", "sampler": {"name": "analytic", "steps": 20}, "samples": 2,
         "controllers": [{"plugin": "length", "params": {"tokens": 8}}]}
SHARED = dict(QUICK, sampler={"name": "confidence", "steps": 20})
CONTINUOUS = {"model": "e2e-continuous", "sampler": {"name": "ddim", "steps": 20}, "samples": 1,
              "controllers": [{"plugin": "length", "params": {"tokens": 6}}]}
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Failure(Exception):
    pass


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []

    def count(self, kind, status):
        with self.lock:
            self.counts.setdefault(kind, {}).setdefault(str(status), 0)
            self.counts[kind][str(status)] += 1

    def fail(self, kind, message):
        with self.lock:
            self.failures.append(f"{kind}: {message}")


def sanitizer_build(rudder):
    """Whether `rudder` was built with AddressSanitizer or ThreadSanitizer: their allocators hold freed memory back
    (ASan's quarantine), so the server's resident memory after a load says nothing about Rudder's own."""
    with open(rudder, "rb") as f:
        binary = f.read()
    return b"__asan_init" in binary or b"__tsan_init" in binary


def model_with_template(folder, template):
    """e2e-mdlm copied to `folder` with `template` as its tokenizer_config.json's chat template."""
    shutil.copytree(os.path.join(REPO, "models", "e2e-mdlm"), folder)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": template}, f)


def rss_mb(pid, field="VmRSS"):
    """Resident memory (VmRSS), or its anonymous part (RssAnon: the heap, stacks) or its file part (RssFile: the
    pages of the program and its libraries read in)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024


class Client:
    """A kept-alive connection, opened again when the server closes it (it closes after refusals)."""

    def __init__(self, port):
        self.port = port
        self.conn = None

    def request(self, method, path, body=None, headers=None, raw_body=None, timeout=120):
        data = raw_body if raw_body is not None else (json.dumps(body) if body is not None else None)
        hdrs = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}
        hdrs.update(headers or {})
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            try:
                self.conn.request(method, path, body=data, headers={k: v for k, v in hdrs.items() if v is not None})
                r = self.conn.getresponse()
                text = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, text.decode("utf-8")
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # A kept-alive connection the server closed (idle, or after a refusal) between two requests.
                self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise

    def json(self, *args, **kwargs):
        status, text = self.request(*args, **kwargs)
        return status, json.loads(text)


def raw_exchange(port, data, timeout=30):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as c:
        c.sendall(data)
        out = b""
        while True:
            chunk = c.recv(65536)
            if not chunk:
                break
            out += chunk
    return int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/1.1 ") else None, out


def events(text):
    out, event = [], None
    for line in text.splitlines():
        if line.startswith("event: "):
            event = line[len("event: "):]
        elif line.startswith("data: "):
            out.append((event, json.loads(line[len("data: "):])))
    return out


def issues(body):
    return {i["pointer"] for i in body.get("issues", [])}


class Soak:
    def __init__(self, rudder, fixtures, scratch, clients):
        self.rudder = rudder
        self.scratch = scratch
        self.clients = clients
        models = os.path.join(scratch, "models")
        os.makedirs(os.path.join(models, "fifo"))
        os.mkfifo(os.path.join(models, "fifo", "config.json"))
        os.makedirs(os.path.join(models, "leaky"))
        shutil.copy(os.path.join(REPO, "models", "e2e-discrete", "config.json"), os.path.join(models, "leaky"))
        os.symlink("/etc/passwd", os.path.join(models, "leaky", "vocab.txt"))
        # Chat templates that once took the server (issue 64): a SIGFPE, a stack overflow, a render without end.
        for name, template in (("template_fpe", "{{ (-9223372036854775807 - 1) // -1 }}"),
                               ("template_deep", "{% if true %}" * 20000 + "x" + "{% endif %}" * 20000),
                               ("template_recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
                               ("template_endless", "{% for a in range(100000) %}{% for b in range(100000) %}"
                                                    "{% endfor %}{% endfor %}")):
            model_with_template(os.path.join(models, name), template)
        plugins = os.path.join(scratch, "plugins")
        os.makedirs(plugins)
        shutil.copy(os.path.join(fixtures, "plugins", "rudder_faulty.so"), plugins)
        shutil.copy(os.path.join(fixtures, "serve_plugins", "rudder_hostile.so"), plugins)
        env = dict(os.environ, RUDDER_API_KEYS=KEY, RUDDER_PLUGIN_PATH=plugins)
        self.proc = subprocess.Popen(
            [rudder, "serve", "--port", "0", "--threads", "1", "--parallel", "1", "--queue", "64", "--isolation",
             "process", "--models", models, "--models", os.path.join(REPO, "models")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stderr.readline()
        if "listening on http://127.0.0.1:" not in line:
            raise Failure("no listening line: " + line + self.proc.stderr.read())
        self.port = int(line.split("127.0.0.1:")[1].split()[0])
        self.log = []
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()
        self.stats = Stats()
        self.references = {}
        self.health = []  # (time, seconds or None)
        self.memory = []  # (time, MB)

    # ----- valid requests: answered, and answered correctly ---------------------------------------------------

    def reference(self, client, recipe, seed):
        status, body = client.json("POST", "/v1/generate", {"recipe": recipe, "seed": seed})
        if status != 200:
            raise Failure(f"reference for seed {seed}: {status} {body}")
        return [x["text"] for x in body["samples"]]

    def warm_up(self):
        client = Client(self.port)
        for recipe_name, recipe in (("quick", QUICK), ("continuous", CONTINUOUS)):
            for seed in range(1, 5):
                self.references[(recipe_name, seed)] = self.reference(client, recipe, seed)
        # The same seed twice gives the same samples: the references can be trusted.
        if self.reference(client, QUICK, 1) != self.references[("quick", 1)]:
            raise Failure("the same seed gave other samples")
        # Shared runs batch 1 to 16 samples (the recipe's batch_size): each batch shape once, as the load will.
        for n in range(1, 17):
            client.json("POST", "/v1/generate", {"recipe": SHARED, "samples": n})

    def valid(self, client, rng):
        kind = rng.choice(["seeded", "seeded", "seeded_stream", "continuous", "shared", "validate", "listing"])
        if kind in ("seeded", "seeded_stream", "continuous"):
            name, recipe = ("continuous", CONTINUOUS) if kind == "continuous" else ("quick", QUICK)
            seed = rng.randint(1, 4)
            if kind == "seeded_stream":
                status, text = client.request("POST", "/v1/generate", {"recipe": recipe, "seed": seed, "stream": True})
                seen = events(text) if status == 200 else []
                texts = [d["text"] for e, d in seen if e == "sample"]
                ok = status == 200 and seen and seen[-1][0] == "done" and texts == self.references[(name, seed)]
            else:
                status, body = client.json("POST", "/v1/generate", {"recipe": recipe, "seed": seed})
                ok = status == 200 and [x["text"] for x in body["samples"]] == self.references[(name, seed)]
            detail = "" if ok else (text[-300:] if kind == "seeded_stream" else str(body)[:300])
        elif kind == "shared":
            n = rng.randint(1, 3)
            status, body = client.json("POST", "/v1/generate", {"recipe": SHARED, "samples": n})
            ok = status == 200 and len(body["samples"]) == n and all(
                x["controls"]["length"]["satisfied"] for x in body["samples"])
            detail = str(body)[:300]
        elif kind == "validate":
            status, body = client.json("POST", "/v1/validate", {"recipe": QUICK})
            ok = status == 200 and body["valid"]
            detail = str(body)[:300]
        else:
            path = rng.choice(["/v1/models", "/v1/plugins", "/metrics"])
            status, text = client.request("GET", path)
            ok = status == 200 and (path == "/metrics" or "e2e-discrete" in text or "length" in text)
            detail = text[:300]
            kind = "listing " + path
        self.stats.count("valid " + kind, status)
        if not ok:
            self.stats.fail("valid " + kind, f"{status} {detail}")

    # ----- hostile requests: each gets the answer it should, and the server stays up --------------------------

    def hostile(self, client, rng):
        kinds = {
            "path not UTF-8": self.bad_path, "body not UTF-8": self.bad_body, "model path": self.model_path,
            "FIFO model": self.fifo_model, "model linking out": self.leaky_model, "in_process asked": self.less_isolation,
            "plugin path": self.plugin_path, "1 MB model name": self.huge_name, "body over the limit": self.big_body,
            "no API key": self.no_key, "wrong API key": self.wrong_key, "foreign origin": self.foreign_origin,
            "garbage": self.garbage, "crashing plugin": self.crash, "plugin message not UTF-8": self.bad_message,
            "slow headers": self.slow_headers, "slow body": self.slow_body,
            "chunked body over the limit": self.big_chunked_body, "malformed length": self.malformed_length,
            "hostile chat template": self.hostile_template, "endless chat template": self.endless_template,
            "schema past its budget": self.wide_schema,
        }
        weights = {"1 MB model name": 0.2, "body over the limit": 0.2, "chunked body over the limit": 0.2,
                   "slow headers": 0.1, "slow body": 0.1, "endless chat template": 0.05, "schema past its budget": 0.1,
                   "crashing plugin": 0.3}
        names = list(kinds)
        kind = rng.choices(names, [weights.get(n, 1.0) for n in names])[0]
        status, ok, detail = kinds[kind](client, rng)
        self.stats.count("hostile " + kind, status)
        if not ok:
            self.stats.fail("hostile " + kind, f"{status} {detail}")

    def bad_path(self, client, rng):
        path = "/" + "".join(rng.choice(["%FF", "%C3", "%80", "a", "/", "%00"]) for _ in range(rng.randint(1, 12)))
        status, text = client.request("GET", path)
        return status, status in (400, 404) and "error" in json.loads(text), text[:200]

    def bad_body(self, client, rng):
        raw = rng.choice([b'{"recipe": "\xff"}', b'{"recipe": {"model": "e2e-discrete\xfe"}}',
                          b'{"recipe": {"model": "e2e-discrete", "controllers": [{"plugin": "span", "params": '
                          b'{"prefix": "The \xc3"}}]}}', b'\xff\xfe{'])
        status, text = client.request("POST", rng.choice(["/v1/generate", "/v1/validate"]), raw_body=raw)
        return status, status == 400 and "error" in json.loads(text), text[:200]

    def expect_400_at(self, client, body, pointer, path=None):
        status, answer = client.json("POST", path or "/v1/generate", body)
        return status, status == 400 and pointer in issues(answer) and "root:" not in json.dumps(answer), str(answer)[:300]

    def model_path(self, client, rng):
        model = rng.choice(["/etc", "/no/such", "../models/e2e-discrete", os.path.join(REPO, "models", "e2e-discrete")])
        return self.expect_400_at(client, {"recipe": dict(QUICK, model=model)}, "/recipe/model")

    def fifo_model(self, client, rng):
        return self.expect_400_at(client, {"recipe": dict(QUICK, model="fifo")}, "/recipe/model", "/v1/validate")

    def leaky_model(self, client, rng):
        return self.expect_400_at(client, {"recipe": dict(QUICK, model="leaky")}, "/recipe/model")

    def less_isolation(self, client, rng):
        return self.expect_400_at(client, {"recipe": dict(QUICK, isolation="in_process")}, "/recipe/isolation")

    def plugin_path(self, client, rng):
        recipe = dict(QUICK, controllers=[{"plugin": "../plugins/rudder_faulty.so"}])
        return self.expect_400_at(client, {"recipe": recipe}, "/recipe/controllers/0/plugin")

    def huge_name(self, client, rng):
        status, text = client.request("POST", "/v1/generate", {"recipe": dict(QUICK, model="m" * 1000000)})
        return status, status == 400 and len(text) < 4000, text[:200]

    def big_body(self, client, rng):
        status, text = client.request("POST", "/v1/generate", raw_body=b"x" * (2 << 20))
        return status, status == 413, text[:200]

    def big_chunked_body(self, client, rng):
        """A chunked body past --max-body (1 MB): 413 as soon as the chunks pass it, the rest not read (issue 64)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as c:
            c.sendall(b"POST /v1/generate HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + KEY.encode() +
                      b"\r\nTransfer-Encoding: chunked\r\n\r\n")
            size = rng.choice([1 << 12, 1 << 16, 1 << 20])
            piece = b"%x\r\n" % size + b"{" * size + b"\r\n"
            answer = b""
            try:
                for _ in range((4 << 20) // size):
                    c.sendall(piece)
            except OSError:
                pass  # the server answered and closed: read its answer
            try:
                while b"\r\n\r\n" not in answer:
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    answer += chunk
            except OSError:
                pass
        status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else None
        return status, status == 413, repr(answer[:200])

    def malformed_length(self, client, rng):
        length = rng.choice([b"-5", b"1" * 20, b"abc", b"2\r\nContent-Length: 3"])
        status, out = raw_exchange(self.port, b"POST /v1/generate HTTP/1.1\r\nHost: localhost\r\nAuthorization: "
                                   b"Bearer " + KEY.encode() + b"\r\nContent-Length: " + length + b"\r\n\r\n{}")
        return status, status == 400, repr(out[:200])

    def hostile_template(self, client, rng):
        model = rng.choice(["template_fpe", "template_deep", "template_recursion"])
        status, body = client.json("POST", "/v1/chat/completions",
                                   {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
        return status, status == 400 and "chat template" in body["error"]["message"], str(body)[:200]

    def endless_template(self, client, rng):
        """A render that would not end: stopped by its step limit (about 10^7 steps, seconds) with a 400."""
        status, body = client.json("POST", "/v1/chat/completions",
                                   {"model": "template_endless", "max_tokens": 4,
                                    "messages": [{"role": "user", "content": "hi"}]})
        return status, status in (400, 504), str(body)[:200]

    def wide_schema(self, client, rng):
        """A small schema whose compile once took a minute (an anyOf of 2,000 open objects): refused within seconds,
        naming its real cause (issue 64)."""
        schema = {"anyOf": [{"type": "object", "properties": {f"p{i}": {"type": "integer"}}, "required": [f"p{i}"]}
                            for i in range(2000)]}
        status, body = client.json("POST", "/v1/chat/completions",
                                   {"model": "e2e-mdlm", "max_tokens": 24,
                                    "messages": [{"role": "user", "content": "a record"}],
                                    "response_format": {"type": "json_schema",
                                                        "json_schema": {"name": "wide", "schema": schema}}})
        return status, status == 400 and "additionalProperties" in json.dumps(body), str(body)[:300]

    def no_key(self, client, rng):
        status, text = client.request("GET", "/v1/models", headers={"Authorization": None})
        return status, status == 401, text[:200]

    def wrong_key(self, client, rng):
        status, text = client.request("POST", "/v1/generate", {"recipe": QUICK},
                                      headers={"Authorization": "Bearer " + "w" * 25})
        return status, status == 401, text[:200]

    def foreign_origin(self, client, rng):
        status, text = client.request("POST", "/v1/generate", {"recipe": QUICK},
                                      headers={"Origin": "https://evil.example"})
        return status, status == 403, text[:200]

    def garbage(self, client, rng):
        data = rng.choice([b"\xff\xfe\xfd\r\n\r\n", b"GET\r\n\r\n", b"POST /v1/generate HTTP/9.9\r\n\r\n",
                           b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", bytes(rng.randrange(256) for _ in range(64))])
        status, _ = raw_exchange(self.port, data)
        return status, status in (None, 400, 404, 414), repr(data[:40])

    def crash(self, client, rng):
        recipe = dict(QUICK, controllers=[{"plugin": "faulty", "params": {"fault": "abort", "at_step": 1}}])
        status, text = client.request("POST", "/v1/generate", {"recipe": recipe})
        return status, status == 500, text[:200]

    def bad_message(self, client, rng):
        recipe = dict(QUICK, controllers=[{"plugin": "hostile", "params": {"bad_message_at": 2}}])
        status, text = client.request("POST", "/v1/generate", {"recipe": recipe, "stream": True})
        seen = events(text) if status == 200 else []
        return status, bool(seen) and seen[-1][0] == "error" and "\ufffd" in seen[-1][1]["error"], text[-200:]

    def slow_headers(self, client, rng):
        """Five sockets that send a header line every 2 s: the server drops them (its header timeout, 10 s)."""
        socks = [socket.create_connection(("127.0.0.1", self.port), timeout=5) for _ in range(5)]
        start = time.monotonic()
        for c in socks:
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        dropped = 0
        while time.monotonic() - start < 20 and dropped < len(socks):
            time.sleep(2)
            dropped = 0
            for c in socks:
                try:
                    c.sendall(b"X-Slow: 1\r\n")
                    c.setblocking(False)
                    try:
                        dropped += c.recv(1) == b""
                    except BlockingIOError:
                        pass
                    c.setblocking(True)
                except OSError:
                    dropped += 1
        for c in socks:
            c.close()
        return "dropped", dropped == len(socks), f"{dropped} of 5 dropped after {time.monotonic() - start:.0f} s"

    def slow_body(self, client, rng):
        """A body that trickles a byte a second: dropped at the body timeout (60 s), or answered once complete."""
        c = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        body = json.dumps({"recipe": QUICK}).encode()
        c.sendall(b"POST /v1/validate HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + KEY.encode() +
                  b"\r\nContent-Length: " + str(len(body) + 10).encode() + b"\r\n\r\n" + body[:10])
        for _ in range(8):
            time.sleep(1)
            c.sendall(b" ")
        c.close()  # a client that gives up: the server's thread is freed
        return "abandoned", True, ""

    # ----- the load ---------------------------------------------------------------------------------------------

    def probe(self, stop):
        while not stop.wait(0.5):
            start = time.monotonic()
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                c.request("GET", "/healthz")
                ok = c.getresponse().status == 200
                c.close()
                self.health.append((start, time.monotonic() - start if ok else None))
            except OSError:
                self.health.append((start, None))

    def sample_memory(self, stop):
        while not stop.wait(5):
            if self.proc.poll() is None:
                self.memory.append((time.monotonic(), rss_mb(self.proc.pid)))

    def client_loop(self, index, until):
        rng = random.Random(index)
        client = Client(self.port)
        while time.monotonic() < until and self.proc.poll() is None:
            try:
                (self.valid if rng.random() < 0.5 else self.hostile)(client, rng)
            except Exception as e:  # an answer missing, not JSON, or a connection dropped: a failure
                self.stats.fail("client", f"{type(e).__name__}: {e}")
                client = Client(self.port)

    def run(self, seconds):
        started = time.monotonic()
        cold = rss_mb(self.proc.pid)
        self.warm_up()
        time.sleep(3)
        warm = rss_mb(self.proc.pid)
        warm_parts = (rss_mb(self.proc.pid, "RssAnon"), rss_mb(self.proc.pid, "RssFile"))
        stop = threading.Event()
        helpers = [threading.Thread(target=self.probe, args=(stop,)),
                   threading.Thread(target=self.sample_memory, args=(stop,))]
        for h in helpers:
            h.start()
        until = time.monotonic() + seconds
        threads = [threading.Thread(target=self.client_loop, args=(i, until)) for i in range(self.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        load_end = time.monotonic()
        # Back to within 10% of the warm level: the server gives freed memory back once idle.
        end = rss_mb(self.proc.pid)
        while end > warm * 1.1 and time.monotonic() - load_end < 30:
            time.sleep(1)
            end = rss_mb(self.proc.pid)
        settle = time.monotonic() - load_end
        end_parts = (rss_mb(self.proc.pid, "RssAnon"), rss_mb(self.proc.pid, "RssFile"))
        stop.set()
        for h in helpers:
            h.join()
        alive = self.proc.poll() is None
        answered = [s for _, s in self.health if s is not None]
        slow_health = [s for _, s in self.health if s is None or s >= 1]
        result = {
            "seconds": round(load_end - started - (until - seconds - started), 1), "clients": self.clients,
            "alive": alive, "requests": self.stats.counts,
            "valid_requests": sum(n for k, v in self.stats.counts.items() if k.startswith("valid") for n in v.values()),
            "hostile_requests": sum(n for k, v in self.stats.counts.items() if k.startswith("hostile")
                                    for n in v.values()),
            "failures": self.stats.failures[:50], "failure_count": len(self.stats.failures),
            "healthz": {"probes": len(self.health), "over_1s_or_unanswered": len(slow_health),
                        "max_s": round(max(answered), 3) if answered else None,
                        "p99_s": round(sorted(answered)[int(0.99 * (len(answered) - 1))], 3) if answered else None},
            "rss_mb": {"cold": round(cold), "warm": round(warm), "peak": round(max(m for _, m in self.memory))
                       if self.memory else None, "end": round(end), "settled_after_s": round(settle, 1),
                       "warm_anon_file": [round(x) for x in warm_parts], "end_anon_file": [round(x) for x in end_parts]},
        }
        result["rss_judged"] = not sanitizer_build(self.rudder)
        result["passed"] = (alive and not slow_health and not self.stats.failures and
                            (end <= warm * 1.1 or not result["rss_judged"]))
        return result

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return None
        return self.proc.returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("rudder")
    parser.add_argument("fixtures")
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        soak = Soak(args.rudder, args.fixtures, scratch, args.clients)
        try:
            result = soak.run(args.seconds)
        finally:
            code = soak.stop()
    result["exit_code"] = code
    result["passed"] = result["passed"] and code == 0
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if not result["passed"]:
        print("FAIL: soak", "\n".join(result["failures"][:10]), "".join(soak.log)[-2000:])
        sys.exit(1)
    print("ok: soak")


if __name__ == "__main__":
    main()
