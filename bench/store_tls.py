"""TLS to the store: the same PostgreSQL reached in plain text and with
sslmode=verify-full, by two pairs of members (role all, --store), one pair
per mode. Per round, for each mode in turn (order alternating):

- deploy: DEPLOYS deploys of a wasm module to one member (each a new
  version: writes, an advisory lock, a NOTIFY), median latency;
- KV write: CALLS calls of the KV counter (a read and a write in the store
  each), median latency;
- change notice: a deploy on one member until the other member serves the
  new version (NOTIFY carried by the listener's own connection), median;
then, once per mode, how long a member takes to start (opening the store:
its first connection, migrations checked, the listener's connection).

Ratios are TLS over plain, per round (bench/paired.py).
Usage: store_tls.py HEARTH WORK PGPORT CA_PEM
"""
import os
import statistics
import sys
import time

import hearthbench as hb
from paired import median_ci

BIN, WORK, PORT, CA = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
ROUNDS = int(os.environ.get("ROUNDS", "10"))
DEPLOYS = int(os.environ.get("DEPLOYS", "10"))
CALLS = int(os.environ.get("CALLS", "200"))
ROOT = os.path.join(os.path.dirname(__file__), "..", "examples", "wasm")
HELLO = open(os.path.join(ROOT, "hello.wat"), "rb").read()
ECHO = open(os.path.join(ROOT, "echo.wat"), "rb").read()
COUNTER = open(os.path.join(ROOT, "counter.wat"), "rb").read()

STORES = {
    "plain": f"postgres://hearth@127.0.0.1:{PORT}/plain?sslmode=disable",
    "tls": f"postgres://hearth@localhost:{PORT}/tls?sslmode=verify-full&sslrootcert={CA}",
}


def member(mode, n):
    work = os.path.join(WORK, f"{mode}{n}")
    os.makedirs(work, exist_ok=True)
    t0 = time.perf_counter()
    proc, addr, token = hb.start(BIN, work, "--store", STORES[mode])
    return proc, addr, token, time.perf_counter() - t0


def ms(samples):
    return statistics.median(samples) * 1000


def deploys(addr, token):
    out = []
    for i in range(DEPLOYS):
        t0 = time.perf_counter()
        hb.deploy(addr, token, "d", HELLO if i % 2 else ECHO, runtime="wasm")
        out.append(time.perf_counter() - t0)
    return ms(out)


def kv_writes(addr, token):
    c = hb.Client(addr, token)
    out = []
    for _ in range(CALLS):
        t0 = time.perf_counter()
        status, _ = c.call("POST", "/fn/admin/counter")
        assert status == 200, status
        out.append(time.perf_counter() - t0)
    return ms(out)


def notices(a, b, token, round_):
    """A deploy on member a until member b answers with it."""
    c = hb.Client(b, token)
    out = []
    for i in range(DEPLOYS):
        code, want = (ECHO, b"ping") if (round_ + i) % 2 else (HELLO, b"hello from wasm\n")
        t0 = time.perf_counter()
        hb.deploy(a, token, "n", code, runtime="wasm")
        while True:
            status, body = c.call("POST", "/fn/admin/n", b"ping")
            if status == 200 and body == want:
                break
            time.sleep(0.0005)
        out.append(time.perf_counter() - t0)
    return ms(out)


def main():
    members, starts = {}, {}
    for mode in STORES:
        one = member(mode, 1)
        two = member(mode, 2)
        members[mode] = (one, two)
        starts[mode] = (one[3] + two[3]) / 2 * 1000
        hb.deploy(one[1], one[2], "counter", COUNTER, runtime="wasm")
        hb.deploy(one[1], one[2], "n", HELLO, runtime="wasm")
    rounds = []
    for r in range(ROUNDS):
        order = list(STORES) if r % 2 == 0 else list(STORES)[::-1]
        got = {}
        for mode in order:
            (p1, a1, token, _), (p2, a2, _, _) = members[mode]
            got[mode] = {
                "deploy": deploys(a1, token),
                "kv": kv_writes(a1, token),
                "notice": notices(a1, a2, token, r),
            }
        rounds.append(got)
    print("| path | plain (median ms) | verify-full TLS (median ms) | TLS / plain, per round [95% CI] |")
    print("|---|---|---|---|")
    for key, what in [("deploy", "a deploy"), ("kv", "a KV counter call (read + write)"),
                      ("notice", "a deploy until the other member serves it")]:
        plain = statistics.median(r["plain"][key] for r in rounds)
        tls = statistics.median(r["tls"][key] for r in rounds)
        med, lo, hi = median_ci([r["tls"][key] / r["plain"][key] for r in rounds])
        print(f"| {what} | {plain:.2f} | {tls:.2f} | {med:.3f}× [{lo:.3f}, {hi:.3f}] |")
    print(f"| a member's start (store opened, listener connected) | {starts['plain']:.0f} | "
          f"{starts['tls']:.0f} | {starts['tls'] / starts['plain']:.2f}× (one start each of two members) |")
    print(f"\n{ROUNDS} rounds; {DEPLOYS} deploys and notices, {CALLS} KV calls per mode per round.")
    for (one, two) in members.values():
        for p in (one[0], two[0]):
            p.terminate()
            p.wait()


main()
