"""What the Python benches share: a daemon started on 127.0.0.1:0 in a
directory of its own, a keep-alive client, a deploy."""
import http.client
import json
import os
import subprocess
import time


def start(binary, work, *args):
    """`hearth up` from `binary` with its data in `work`, and `args`; its
    process, address and admin token once it listens."""
    data = os.path.join(work, "data")
    log = open(os.path.join(work, "daemon.log"), "w")
    proc = subprocess.Popen(
        [binary, "--data-dir", data, "up", "--listen", "127.0.0.1:0",
         "--examples", "false", *args],
        env={**os.environ, "HEARTH_LOG": "warn"}, stdout=log, stderr=log)
    for _ in range(600):
        try:
            with open(os.path.join(data, "server.json")) as f:
                info = json.load(f)
            if info.get("pid") == proc.pid:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    else:
        raise SystemExit("hearth did not start")
    token = open(os.path.join(data, "token")).read().strip()
    host, port = info["url"].removeprefix("http://").split(":")
    return proc, (host, int(port)), token


class Client:
    """One keep-alive connection."""

    def __init__(self, addr, token=None, timeout=30, source=None):
        self.addr, self.token, self.timeout = addr, token, timeout
        self.source = (source, 0) if source else None
        self.conn = None

    def call(self, method, path, body=b"", headers=None):
        h = dict(headers or {})
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(*self.addr, timeout=self.timeout,
                                                       source_address=self.source)
            try:
                self.conn.request(method, path, body=body, headers=h)
                r = self.conn.getresponse()
                return r.status, r.read()
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise


def deploy(addr, token, name, code, **query):
    q = "&".join(f"{k}={v}" for k, v in query.items())
    status, body = Client(addr, token, timeout=120).call(
        "POST", f"/v1/functions/{name}?{q}", code)
    if status != 201:
        raise SystemExit(f"deploy {name}: {status} {body[:300]!r}")
