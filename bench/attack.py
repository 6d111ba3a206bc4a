#!/usr/bin/env python3
"""One tenant attacks each node-wide budget at full strength while another
tenant's wasm, JS and Python functions are timed (each from a process of its
own, apart from the attacker's clients, which connect from another
address): the victim's p50 and p99
against the same node idle, in paired rounds (idle, then attacked), the
victim's errors, what the attacker got back, and the daemon's peak RSS
against its configured capacity.

Usage: bench/attack.py BIN [rounds] [seconds] [attacks]
  BIN      a `hearth` binary (a release build)
  rounds   idle/attacked pairs per attack (default 3)
  seconds  each phase's length (default 6)
  attacks  a comma-separated subset of the attacks below (default all)

Attacks (each from the `attacker` tenant, as many clients as it likes):
  memory       48 callers of a module that takes 200 MiB and spins to its
               3 s deadline (256 MiB limit each)
  fds          64 callers of a JS function making 16 fetches each to an
               allowed host that accepts and never answers
  connections  300 half-sent request heads (reopened when cut) and 16
               callers posting 6 MiB bodies without reading the answers
  logs         8 callers of a JS function logging 1 MB per call
  python       16 callers of a Python function that spins for 2 s per
               call, each in a handler process of its own
  deploys      2 deployers of a 12,000-function module, back to back
  flood        48 callers of a function that does not exist (404): the
               request rate alone, for comparison with memory and fds,
               whose refused callers (429) retry as fast
  spinner      no attacker: one process outside Hearth spinning at nice
               +10, as a compile or a tenant over its CPU share runs; the
               machine's floor for any work behind the victim's
  idlespinner  the same spinner at SCHED_IDLE, the lowest the kernel has
"""
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import hearthbench
from hearthbench import Client, deploy

BIN = sys.argv[1]
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
SECS = float(sys.argv[3]) if len(sys.argv) > 3 else 6
ONLY = sys.argv[4].split(",") if len(sys.argv) > 4 else None
CAPACITY_MIB = 1024
# The attacker's clients connect from an address of their own, as an
# attacker on the internet does; the victim's from 127.0.0.1.
ATTACKER = "127.0.0.2"


def start(work):
    return hearthbench.start(BIN, work, "--capacity-mib", str(CAPACITY_MIB),
                             "--allow-private-egress", "true")


HOLD_WAT = """(module
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (memory.grow (i32.const 3200)))
    (loop $forever (br $forever))))"""


def big_module(functions=12000):
    body = "\n".join(
        f"(func $f{i} (param i32) (result i32) " + "(i32.add (local.get 0) "
        * 20 + "(i32.const 1)" + ")" * 20 + ")"
        for i in range(functions))
    start = '(memory (export "memory") 1) (func (export "_start"))'
    return f"(module {start} {body})".encode()


def slow_server():
    """Accepts and never answers: an allowed host that is slow."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4096)
    held = []

    def run():
        while True:
            try:
                c, _ = s.accept()
                held.append(c)
            except OSError:
                return
    threading.Thread(target=run, daemon=True).start()
    return s, s.getsockname()[1], held


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


def probe(addr, fns, secs):
    """Each victim function called back to back on its own connection, in
    a process of its own: threads of one Python process take turns at its
    lock, so a victim sharing the attacker's process would wait on the
    attacker's clients, not on Hearth."""
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()

    def one(fn):
        c = Client(addr, timeout=30)
        lat, errors = [], 0
        end = time.monotonic() + secs
        while time.monotonic() < end:
            t = time.monotonic()
            try:
                status, _ = c.call("POST", f"/fn/victim/{fn}", b"{}")
            except OSError:
                status = 0
            lat.append((time.monotonic() - t) * 1000)
            errors += status != 200
        results.put((fn, lat, errors))
    procs = [ctx.Process(target=one, args=(f,)) for f in fns]
    for p in procs:
        p.start()
    out = {}
    for _ in procs:
        fn, lat, errors = results.get()
        out[fn] = (lat, errors)
    for p in procs:
        p.join()
    return out


class Attack:
    def __init__(self, name, workers):
        self.name, self.workers = name, workers
        self.stop = threading.Event()
        self.statuses = {}
        self.lock = threading.Lock()

    def note(self, status):
        with self.lock:
            self.statuses[status] = self.statuses.get(status, 0) + 1

    def start(self):
        self.stop.clear()
        self.threads = [threading.Thread(target=w, args=(self,), daemon=True)
                        for w in self.workers]
        for t in self.threads:
            t.start()

    def end(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=15)


def caller(addr, token, path, body=b"", timeout=30):
    def run(a):
        c = Client(addr, token, timeout=timeout, source=ATTACKER)
        while not a.stop.is_set():
            try:
                status, _ = c.call("POST", path, body)
            except OSError:
                status = 0
            a.note(status)
            if status in (429, 503):
                time.sleep(0.005)
    return run


def loris(addr):
    def run(a):
        socks = []
        while not a.stop.is_set():
            while len(socks) < 300 // 4:
                try:
                    s = socket.create_connection(addr, timeout=2,
                                                 source_address=(ATTACKER, 0))
                    s.sendall(b"POST /fn/attacker/echo HTTP/1.1\r\nHost: x\r\n")
                    socks.append(s)
                except OSError:
                    a.note("refused")
                    time.sleep(0.05)
                    break
            for s in list(socks):
                try:
                    s.sendall(b"X-a: b\r\n")
                except OSError:
                    socks.remove(s)
                    a.note("cut")
            time.sleep(0.5)
        for s in socks:
            s.close()
    return run


def unread_bodies(addr):
    body = b"x" * (6 << 20)
    head = (b"POST /fn/attacker/echo HTTP/1.1\r\nHost: x\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n")

    def run(a):
        while not a.stop.is_set():
            try:
                s = socket.create_connection(addr, timeout=5,
                                             source_address=(ATTACKER, 0))
            except OSError:
                a.note("refused")
                time.sleep(0.05)
                continue
            started = time.monotonic()
            try:
                s.sendall(head + body)
                a.note("sent")
            except OSError:
                # Answered before the body was read, and closed: the
                # caller keeps its pace of one body per 2 s all the same.
                a.note("cut")
            time.sleep(max(0.0, 2 - (time.monotonic() - started)))  # never reads the answer
            s.close()
    return run


def spinner(*policy):
    """A CPU-bound process outside the daemon, at the given scheduling."""
    def run(a):
        p = subprocess.Popen([*policy, sys.executable, "-c", "while True: pass"])
        a.stop.wait()
        p.kill()
        p.wait()
        a.note("spun")
    return run


def deployer(addr, token, module):
    def run(a):
        c = Client(addr, token, timeout=120, source=ATTACKER)
        i = 0
        while not a.stop.is_set():
            i += 1
            try:
                status, _ = c.call(
                    "POST", f"/v1/functions/big{threading.get_ident() % 97}?runtime=wasm",
                    module)
            except OSError:
                status = 0
            a.note(status)
    return run


def main():
    work = tempfile.mkdtemp()
    proc, addr, admin = start(work)
    slow, slow_port, _held = slow_server()
    try:
        tokens = {}
        for t in ("victim", "attacker"):
            status, body = Client(addr, admin).call(
                "POST", "/v1/tenants", json.dumps({"name": t}).encode(),
                {"Content-Type": "application/json"})
            assert status == 201, body
            tokens[t] = json.loads(body)["token"]
        v, x = tokens["victim"], tokens["attacker"]
        hello = open(os.path.join(os.path.dirname(__file__), "..", "examples", "wasm",
                                  "hello.wat"), "rb").read()
        deploy(addr, v, "wasm", hello, runtime="wasm", public="true")
        deploy(addr, v, "js", b"export default { fetch() { return new Response('hi'); } };\n",
               runtime="js", file_name="index.mjs", public="true")
        deploy(addr, v, "py", b"def handler(event, context):\n    return 'hi'\n",
               runtime="python", file_name="handler.py", public="true")
        echo = open(os.path.join(os.path.dirname(__file__), "..", "examples", "wasm",
                                 "echo.wat"), "rb").read()
        deploy(addr, x, "echo", echo, runtime="wasm", public="true")
        deploy(addr, x, "hold", HOLD_WAT.encode(), runtime="wasm", memory_mib="256",
               timeout_ms="3000")
        fetches = ("export default { async fetch() { await Promise.all(Array.from("
                   "{length: 16}, () => fetch('http://127.0.0.1:%d/').catch(e => e)));"
                   " return new Response('x'); } };\n" % slow_port).encode()
        deploy(addr, x, "fds", fetches, runtime="js", file_name="index.mjs",
               allow_host=f"127.0.0.1:{slow_port}", timeout_ms="5000")
        logs = (b"export default { fetch() { const l = 'x'.repeat(62500);"
                b" for (let i = 0; i < 16; i++) console.log(l);"
                b" return new Response('x'); } };\n")
        deploy(addr, x, "logs", logs, runtime="js", file_name="index.mjs")
        pyspin = (b"import time\n"
                  b"def handler(event, context):\n"
                  b"    end = time.monotonic() + 2\n"
                  b"    while time.monotonic() < end:\n"
                  b"        pass\n"
                  b"    return 'spun'\n")
        deploy(addr, x, "pyspin", pyspin, runtime="python", file_name="handler.py",
               timeout_ms="3000")
        module = big_module()
        fns = ["wasm", "js", "py"]
        probe(addr, fns, 1.5)  # warm

        attacks = [
            Attack("memory", [caller(addr, x, "/fn/attacker/hold")] * 48),
            Attack("fds", [caller(addr, x, "/fn/attacker/fds")] * 64),
            Attack("connections", [loris(addr)] * 4 + [unread_bodies(addr)] * 16),
            Attack("logs", [caller(addr, x, "/fn/attacker/logs")] * 8),
            Attack("python", [caller(addr, x, "/fn/attacker/pyspin")] * 16),
            Attack("deploys", [deployer(addr, x, module)] * 2),
            Attack("flood", [caller(addr, x, "/fn/attacker/nothing")] * 48),
            Attack("spinner", [spinner("nice", "-n", "10")]),
            Attack("idlespinner", [spinner("chrt", "--idle", "0")]),
        ]
        attacks = [a for a in attacks if ONLY is None or a.name in ONLY]
        peak = {"idle": 0}
        stop_rss = threading.Event()
        phase = ["idle"]

        def sample():
            while not stop_rss.is_set():
                k = phase[0]
                peak[k] = max(peak.get(k, 0), rss_kib(proc.pid))
                time.sleep(0.1)
        threading.Thread(target=sample, daemon=True).start()

        rows = []
        for a in attacks:
            idle = {f: ([], 0) for f in fns}
            hit = {f: ([], 0) for f in fns}
            for _ in range(ROUNDS):
                phase[0] = "idle"
                for f, (lat, err) in probe(addr, fns, SECS).items():
                    idle[f] = (idle[f][0] + lat, idle[f][1] + err)
                phase[0] = a.name
                a.start()
                time.sleep(1.5)
                for f, (lat, err) in probe(addr, fns, SECS).items():
                    hit[f] = (hit[f][0] + lat, hit[f][1] + err)
                a.end()
                phase[0] = "idle"
                time.sleep(3)  # the attack's last calls drain
            for f in fns:
                il, ie = idle[f]
                hl, he = hit[f]
                rows.append((a.name, f, pct(il, .5), pct(il, .99), pct(hl, .5), pct(hl, .99),
                             pct(hl, .99) / pct(il, .99), he, len(hl), peak.get(a.name, 0)))
            print(f"{a.name}: attacker got {dict(sorted(a.statuses.items(), key=str))}",
                  file=sys.stderr)
        stop_rss.set()
        # What the daemon may hold by its settings, above its own base:
        # running invocations (--capacity-mib), request bodies
        # (--max-buffered-mib, a quarter of it), tapes waiting for the
        # writer (256 MiB) and log lines waiting for the store (1/32).
        bound = CAPACITY_MIB + CAPACITY_MIB // 4 + 256 + CAPACITY_MIB // 32
        print(f"rounds: {ROUNDS} × {SECS:g} s per phase; configured bounds {bound} MiB "
              f"(capacity {CAPACITY_MIB}, bodies {CAPACITY_MIB // 4}, tapes queued 256, "
              f"log lines {CAPACITY_MIB // 32}) above the daemon's base; "
              f"peak RSS while idle (after attacks) {peak['idle'] >> 10} MiB")
        print("| attack | victim fn | idle p50 ms | idle p99 ms | attacked p50 ms | "
              "attacked p99 ms | p99 ratio | victim errors | peak RSS MiB |")
        print("|---|---|---|---|---|---|---|---|---|")
        for (name, f, ip50, ip99, hp50, hp99, r, he, n, rss) in rows:
            print(f"| {name} | {f} | {ip50:.2f} | {ip99:.2f} | {hp50:.2f} | {hp99:.2f} | "
                  f"{r:.2f}× | {he} of {n} | {rss >> 10} |")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        slow.close()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
