#!/usr/bin/env python3
"""A node at its limit, and a burst of first calls to functions it has not
prepared: how long the burst takes to be answered, with what, and how much
the node prepared for it (`hearth_prepares_total`, where the build counts
it; `Hearth-Start: cold` answers otherwise), per build, side by side.

Two wasm spinners of tenant `acme` hold 264 of the node's 300 MiB for 3 s;
tenant `beta` has N Python functions (64 MiB each, never called), and N
clients call each once at the same moment.

Usage: bench/refusals.py BIN [BIN...] [--functions N] [--runs R]
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import tempfile
import threading
import time

import hearthbench
from hearthbench import Client, deploy

SPIN = open(os.path.join(os.path.dirname(__file__), "..", "examples", "wasm",
                         "spin.wat"), "rb").read()


def metric(addr, token, series):
    _, body = Client(addr, token).call("GET", "/metrics")
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
               if line.startswith(series))


def call(addr, token, path):
    """One call on a fresh connection: status, whether it said it started,
    and its time in ms."""
    t = time.monotonic()
    c = http.client.HTTPConnection(*addr, timeout=60)
    c.request("POST", path, body=b"{}", headers={"Authorization": f"Bearer {token}"})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status, r.getheader("hearth-start"), (time.monotonic() - t) * 1000


def run(binary, functions):
    work = tempfile.mkdtemp(prefix="hearth-refusals-")
    proc, addr, admin = hearthbench.start(binary, work, "--capacity-mib", "300",
                                          "--capacity-mib-per-tenant", "300")
    try:
        tokens = {}
        for tenant in ("acme", "beta"):
            _, body = Client(addr, admin).call(
                "POST", "/v1/tenants", f'{{"name": "{tenant}"}}'.encode(),
                {"Content-Type": "application/json"})
            tokens[tenant] = json.loads(body)["token"]
        deploy(addr, tokens["acme"], "spin", SPIN, runtime="wasm", timeout_ms="3000",
               memory_mib="128")
        for i in range(functions):
            code = f"def handler(event, context):\n    return {{'n': {i}}}\n".encode()
            deploy(addr, tokens["beta"], f"f{i}", code, runtime="python",
                   file_name="handler.py", memory_mib="64")
        spinners = [threading.Thread(target=call, args=(addr, tokens["acme"], "/fn/acme/spin"))
                    for _ in range(2)]
        for s in spinners:
            s.start()
        while metric(addr, admin, "hearth_memory_reserved_bytes") < 2 * (132 << 20):
            time.sleep(0.01)
        prepared = metric(addr, admin, "hearth_prepares_total")
        t = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(functions) as pool:
            answers = list(pool.map(lambda i: call(addr, tokens["beta"], f"/fn/beta/f{i}"),
                                    range(functions)))
        burst_ms = (time.monotonic() - t) * 1000
        prepares = metric(addr, admin, "hearth_prepares_total") - prepared
        for s in spinners:
            s.join()
        statuses = {}
        for status, _, _ in answers:
            statuses[status] = statuses.get(status, 0) + 1
        started = {}
        for _, start, _ in answers:
            if start:
                started[start] = started.get(start, 0) + 1
        slowest = max(ms for _, _, ms in answers)
        return burst_ms, slowest, statuses, started, prepares
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        os.system(f"rm -rf {work}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bins", nargs="+")
    ap.add_argument("--functions", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    print(f"| build | run | burst of {a.functions} first calls, ms | slowest answer, ms "
          "| answers | `Hearth-Start` said | prepares counted |")
    print("|---|---|---|---|---|---|---|")
    for r in range(a.runs):
        for b in a.bins:
            burst, slowest, statuses, started, prepares = run(b, a.functions)
            print(f"| {os.path.basename(b)} | {r + 1} | {burst:.0f} | {slowest:.0f} | "
                  f"{statuses} | {started or 'nothing'} | {prepares:.0f} |", flush=True)


if __name__ == "__main__":
    main()
