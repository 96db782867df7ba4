"""Two replicas of rudder serve behind nginx (examples/serve/rudder.nginx.conf) on loopback: requests spread over
both, a stream passes through as it is written, and a replica draining on SIGTERM loses no request (nginx sends
them to the other). Exits 77 (skipped), saying why, without nginx.

    python3 nginx_test.py RUDDER REPO
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

RUDDER, REPO = sys.argv[1], sys.argv[2]
sys.argv = [sys.argv[0], RUDDER, "nginx"]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_test import LONG, QUICK, Server, events, fail  # noqa: E402  (serve_test runs no case on import)

NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
if NGINX is None:
    print("SKIP: no nginx (Debian's nginx package; make test installs it)")
    sys.exit(77)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def settled_counts(replicas, name, total, timeout=10):
    """Each replica's metric once they add up to `total` (or after `timeout` s): see Server.settled_metric."""
    deadline = time.monotonic() + timeout
    while sum(counts := [r.metric(name) for r in replicas]) < total and time.monotonic() < deadline:
        time.sleep(0.05)
    return counts


def main():
    replicas = [Server(), Server()]
    port = free_port()
    work = tempfile.mkdtemp()
    snippet = open(os.path.join(REPO, "examples", "serve", "rudder.nginx.conf")).read()
    snippet = (snippet.replace("127.0.0.1:8081", f"127.0.0.1:{replicas[0].port}")
               .replace("127.0.0.1:8082", f"127.0.0.1:{replicas[1].port}")
               .replace("listen 127.0.0.1:8080", f"listen 127.0.0.1:{port}"))
    open(os.path.join(work, "rudder.conf"), "w").write(snippet)
    # The main file a packaged nginx would have, made to run unprivileged in a scratch folder.
    temp = " ".join(f"{kind}_temp_path {work}/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    open(os.path.join(work, "nginx.conf"), "w").write(
        f"daemon off; worker_processes 1; pid {work}/nginx.pid; error_log {work}/error.log warn;\n"
        f"events {{ worker_connections 256; }}\n"
        f"http {{ access_log off; {temp} include {work}/rudder.conf; }}\n")
    nginx = subprocess.Popen([NGINX, "-p", work, "-c", os.path.join(work, "nginx.conf")], stderr=subprocess.PIPE, text=True)
    front = Server.__new__(Server)  # the client helpers, pointed at nginx
    front.port = port
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if nginx.poll() is not None:
                    fail("nginx exited: " + nginx.stderr.read())
                time.sleep(0.1)

        # Eight requests at once: every one answered, by both replicas.
        answers = {}
        threads = [threading.Thread(target=lambda i=i: answers.__setitem__(i, front.json("POST", "/v1/generate", {"recipe": QUICK, "seed": i})))
                   for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert all(answers[i][0] == 200 and len(answers[i][2]["samples"]) == 2 for i in range(8)), answers
        # Each replica counts a request once its logger has run, which may be after nginx has passed the answer on.
        generated = 'rudder_http_requests_total{code="200",path="/v1/generate"}'
        served = settled_counts(replicas, generated, 8)
        assert sum(served) == 8 and min(served) >= 1, f"requests per replica: {served}"

        # A stream through the proxy: its steps arrive before its end.
        c, r = front.open_stream({"recipe": QUICK})
        seen = list(events(r))
        c.close()
        assert [e for e, _ in seen].count("step") == 20 and seen[-1][0] == "done", seen[-3:]
        assert sum(settled_counts(replicas, generated, 9)) == 9  # the stream counted before replica 1's baseline

        # Replica 0 drains (SIGTERM while it streams a long run): nginx sends new requests to replica 1.
        c, r = replicas[0].open_stream({"recipe": dict(LONG, sampler={"name": "ddpm", "steps": 300}, samples=2)})
        stream = events(r)
        assert next(stream)[0] == "step"
        replicas[0].proc.send_signal(signal.SIGTERM)
        deadline = time.time() + 10
        while time.time() < deadline and replicas[0].json("GET", "/healthz")[0] != 503:
            time.sleep(0.05)
        before = replicas[1].metric(generated)
        for i in range(4):
            status, _, body = front.json("POST", "/v1/generate", {"recipe": QUICK})
            assert status == 200, (status, body)
        assert replicas[1].settled_metric(generated, before + 4) == before + 4
        rest = list(stream)
        c.close()
        assert rest[-1][0] == "done", rest[-2:]
        assert replicas[0].proc.wait(timeout=60) == 0
    finally:
        nginx.terminate()
        nginx.wait(timeout=30)
        for replica in replicas:
            replica.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("ok: two replicas behind nginx")


if __name__ == "__main__":
    main()
