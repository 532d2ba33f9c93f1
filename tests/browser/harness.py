"""What the dashboard test drives the browser against: three real
`hookraft serve` processes on loopback forming one cluster, a webhook
receiver the test switches between failing and answering, and a small
client for the public API to seed data and wait on conditions.

Everything is started by this process and stopped by it (by the
processes' own ids). Waits poll a condition under a deadline; nothing
sleeps for correctness.
"""

import http.server
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

DEADLINE_S = 60
POLL_S = 0.1


def wait_for(what, condition, deadline_s=DEADLINE_S):
    """Polls `condition` until it returns something truthy; fails with `what` after the deadline."""
    end = time.monotonic() + deadline_s
    last_error = None
    while time.monotonic() < end:
        try:
            value = condition()
            if value:
                return value
        except Exception as error:  # noqa: BLE001 - a node may be starting or stopping
            last_error = error
        time.sleep(POLL_S)
    raise AssertionError(f"timed out after {deadline_s}s waiting for {what} (last error: {last_error})")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver:
    """Answers `POST /hooks/<name>` as `replies[name]` says, a `(status,
    delay in seconds, body)`, else at once with 204. The test changes the
    replies as it goes (a receiver that fails, then is fixed)."""

    def __init__(self):
        self.replies = {}
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the standard library's name
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                status, delay_s, body = receiver.replies.get(self.path.rsplit("/", 1)[-1], (204, 0, b""))
                time.sleep(delay_s)  # the receiver's own latency
                self.send_response(status)
                self.send_header("content-type", "text/plain")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, name):
        return f"http://127.0.0.1:{self.port}/hooks/{name}"

    def stop(self):
        self.server.shutdown()


class Api:
    """JSON over HTTP to one node, with the operator's token."""

    def __init__(self, port, token):
        self.base = f"http://127.0.0.1:{port}"
        self.token = token

    def call(self, method, path, body=None, timeout=10):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("authorization", f"Bearer {self.token}")
        if data is not None:
            request.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                text = response.read().decode()
                return response.status, (json.loads(text) if text else None)
        except urllib.error.HTTPError as error:
            text = error.read().decode()
            return error.code, (json.loads(text) if text.startswith("{") else text)

    def get(self, path):
        status, body = self.call("GET", path)
        assert status == 200, f"GET {path}: {status} {body}"
        return body

    def post(self, path, body=None, expect=(200, 201, 202)):
        status, answer = self.call("POST", path, body)
        assert status in expect, f"POST {path}: {status} {answer}"
        return answer


class Cluster:
    """Three nodes on loopback with one API token and a short lease, so a
    shard move or a failover takes seconds."""

    LEASE_MS = 2000

    def __init__(self, binary, size=3):
        self.binary = binary
        self.token = "dash-" + secrets.token_hex(12)
        self.dir = tempfile.mkdtemp(prefix="hookraft-browser-")
        self.ports = {n: free_port() for n in range(1, size + 1)}
        self.procs = {}
        peers = ",".join(f"{n}=127.0.0.1:{p}" for n, p in self.ports.items())
        cluster_secret = secrets.token_hex(16)
        for n, port in self.ports.items():
            log = open(os.path.join(self.dir, f"node{n}.log"), "ab")  # noqa: SIM115 - closed with the process
            env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKRAFT_")}
            self.procs[n] = subprocess.Popen(
                [
                    binary, "serve",
                    "--node-id", str(n),
                    "--listen", f"127.0.0.1:{port}",
                    "--advertise", f"127.0.0.1:{port}",
                    "--peers", peers,
                    "--cluster-secret", cluster_secret,
                    "--admin-token", self.token,
                    "--allow-private-targets",
                    "--lease-ms", str(self.LEASE_MS),
                    "--data-dir", os.path.join(self.dir, f"node{n}"),
                ],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )
        for n in self.ports:
            wait_for(f"node {n} ready", lambda n=n: self._ready(n), 90)
        wait_for("every node to name the same leader", self._agreed_leader, 90)

    def api(self, n):
        return Api(self.ports[n], self.token)

    def url(self, n):
        return f"http://127.0.0.1:{self.ports[n]}"

    def _ready(self, n):
        if self.procs[n].poll() is not None:
            raise AssertionError(f"node {n} exited; see {self.dir}/node{n}.log")
        with urllib.request.urlopen(f"{self.url(n)}/readyz", timeout=2) as response:
            return response.status == 200

    def _agreed_leader(self):
        leaders = {self.api(n).get("/v1/cluster")["leader_id"] for n in self.running()}
        return len(leaders) == 1 and None not in leaders

    def leader(self):
        return self.api(self.running()[0]).get("/v1/cluster")["leader_id"]

    def running(self):
        return [n for n, p in self.procs.items() if p.poll() is None]

    def stop_node(self, n):
        """Stops one node the way an operator's SIGTERM would."""
        process = self.procs[n]
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def stop(self, keep_logs=False):
        for n in self.running():
            self.stop_node(n)
        if keep_logs:
            for n in self.procs:
                with open(os.path.join(self.dir, f"node{n}.log"), errors="replace") as log:
                    tail = log.readlines()[-20:]
                print(f"--- the end of node {n}'s log\n{''.join(tail)}", end="")
            print(f"node logs kept in {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
