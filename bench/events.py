"""Events (issue 57): schedule accuracy on one node and through two
gateways, duplicate and missed firings with a gateway killed every 100
ticks, async invocations against direct calls, work after the response
against awaited work, and kill -9 with 10,000 queued. Run by bench/events.sh, which builds Hearth and starts PostgreSQL.

Every firing and queued call GETs a counting server on loopback once, so
an effect that happened twice, or never, is counted where it happened.

Usage: events.py BIN WORK STORE   (prints Markdown)
Environment: FUNCS (schedules, default 20), SECS (how long they fire,
default 60), KILL_TICKS (ticks fired while gateways are killed, default
10000), QUEUED (default 10000), PARTS (default schedules,async,after,kill,nats), ROUNDS
and CALLS (the after part: default 10 rounds of 300 calls), NATS_MSGS (the
nats part: default 20000)."""
import atexit
import collections
import http.server
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from hearthbench import Client, deploy
from hearthbench import start as start_in

BIN, WORK, STORE = sys.argv[1:4]
FUNCS = int(os.environ.get("FUNCS", 20))
SECS = int(os.environ.get("SECS", 60))
KILL_TICKS = int(os.environ.get("KILL_TICKS", 10000))
QUEUED = int(os.environ.get("QUEUED", 10000))
HEARTH = os.path.join(BIN, "hearth")
PARTS = os.environ.get("PARTS", "schedules,async,after,kill,nats").split(",")

hits = collections.Counter()
hits_lock = threading.Lock()


class Counting(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        with hits_lock:
            hits[self.path] += 1
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *a):
        pass


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counting)
threading.Thread(target=srv.serve_forever, daemon=True).start()
UP = f"127.0.0.1:{srv.server_address[1]}"

SCHEDULED = (
    "export default { async scheduled(c) { const late = Date.now() - c.scheduledTime; "
    f"await fetch('http://{UP}/hit/' + c.function_name + '/' + c.scheduledTime); "
    "console.log('fired ' + c.scheduledTime + ' ' + late); } };")


STARTED = []


def start(binary, work, *args):
    """A daemon (stopped when this script exits, however it exits)."""
    os.makedirs(work, exist_ok=True)
    started = start_in(binary, work, *args)
    STARTED.append(started[0])
    return started


def stop_all():
    for p in STARTED:
        if p.poll() is None:
            p.kill()
            p.wait()


atexit.register(stop_all)


def scheduled_code(name):
    return SCHEDULED.replace("c.function_name", json.dumps(name)).encode()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def logs(addr, token, name):
    status, body = Client(addr, token).call("GET", f"/v1/functions/{name}/logs?limit=1000")
    return json.loads(body)["lines"] if status == 200 else []


def firings(addr, token, names):
    """Each function's logged firings: (tick, ms late)."""
    out = {}
    for n in names:
        out[n] = [tuple(int(x) for x in l["message"].split()[1:3])
                  for l in logs(addr, token, n) if l["message"].startswith("fired ")]
    return out


def deploy_schedules(addr, token, names):
    for n in names:
        deploy(addr, token, n, scheduled_code(n), runtime="js", file_name="index.mjs",
               allow_host=UP, timeout_ms="3000", schedule="%40every%201s")


def lateness_row(label, fired):
    late = [ms for f in fired.values() for _, ms in f]
    runs = collections.Counter((n, t) for n, f in fired.items() for t, _ in f)
    twice = sum(1 for c in runs.values() if c > 1)
    return (f"| {label} | {len(late)} | {pct(late, 50)} | {pct(late, 99)} | {max(late)} "
            f"| {twice} |")


def effects(names, since_ms, until_ms):
    """Ticks in [since, until] whose call happened more than once, and
    those that never happened, over `names`."""
    with hits_lock:
        seen = dict(hits)
    dup = missing = total = 0
    for n in names:
        for t in range(since_ms - since_ms % 1000 + 1000, until_ms - until_ms % 1000 + 1, 1000):
            total += 1
            c = seen.get(f"/hit/{n}/{t}", 0)
            dup += c > 1
            missing += c == 0
    return total, dup, missing


def schedules():
    one_fired, two_fired, killed = schedules_run()
    report_schedules(one_fired, two_fired, killed)


def schedules_run():
    # ---- schedules on one node ----
    one, one_addr, one_token = start(HEARTH, os.path.join(WORK, "one"), "--allow-private-egress", "true")
    names = [f"s{i}" for i in range(FUNCS)]
    deploy_schedules(one_addr, one_token, names)
    time.sleep(SECS + 2)
    one_fired = firings(one_addr, one_token, names)
    one.send_signal(signal.SIGTERM)
    one.wait()

    # ---- schedules through two gateways ----
    os.environ["HEARTH_CLUSTER_KEY"] = os.urandom(16).hex()
    os.environ["HEARTH_ADMIN_TOKEN"] = "hth_" + os.urandom(16).hex()
    short = ("--max-timeout-ms", "3000")


    def member(name, role):
        return start(HEARTH, os.path.join(WORK, name), "--role", role, "--store", STORE,
                     "--allow-private-egress", "true", *short)


    gateways = [member("g0", "gateway"), member("g1", "gateway")]
    node = member("node", "node")
    g_addr, token = gateways[0][1], gateways[0][2]
    for _ in range(200):
        s, b = Client(g_addr, token).call("GET", "/v1/cluster/nodes")
        if b'"alive":true' in b:
            break
        time.sleep(0.1)
    cnames = [f"c{i}" for i in range(FUNCS)]
    deploy_schedules(g_addr, token, cnames)
    time.sleep(SECS + 2)
    two_fired = firings(g_addr, token, cnames)

    # ---- a gateway killed every 100 ticks ----
    every = 100 / FUNCS
    kills = 0
    began = int(time.time() * 1000)
    deadline = time.time() + KILL_TICKS / FUNCS
    while time.time() < deadline:
        time.sleep(every)
        victim = kills % 2
        proc = gateways[victim][0]
        proc.kill()
        proc.wait()
        gateways[victim] = member(f"g{victim}", "gateway")
        kills += 1
    ended = int(time.time() * 1000)
    # Claims the killed gateways held lapse (3 + 5 s) and are taken over.
    time.sleep(12)
    alive = gateways[1][1]
    total, dup, missing = effects(cnames, began, ended - 2000)
    killed_fired = firings(alive, token, cnames)
    runs = collections.Counter((n, t) for n, f in killed_fired.items() for t, _ in f if began <= t <= ended)
    reran = sum(1 for c in runs.values() if c > 1)
    for g in gateways + [node]:
        g[0].send_signal(signal.SIGTERM)
        g[0].wait()

    return one_fired, two_fired, (kills, began, ended, total, dup, missing, reran)


def report_schedules(one_fired, two_fired, killed):
    kills, began, ended, total, dup, missing, reran = killed
    print(f"### Schedules: {FUNCS} functions `@every 1s` for {SECS} s each way, {os.cpu_count()} cores")
    print()
    print("Lateness: the firing's `Date.now()` in the function less its tick (claim, dispatch,")
    print("instantiate); a tick run twice is one whose claim was taken over and run again.")
    print()
    print("| where | firings | p50 ms late | p99 ms late | max ms | ticks run twice |")
    print("|---|---|---|---|---|---|")
    print(lateness_row("one node (SQLite)", one_fired))
    print(lateness_row("two gateways, one node (PostgreSQL)", two_fired))
    print()
    print(f"With a gateway killed (-9) and restarted every 100 ticks ({kills} kills over "
          f"{(ended - began) / 1000:.0f} s): {total} ticks, **{dup} whose call happened twice**, "
          f"**{missing} never fired**; {reran} ticks were run again after a takeover (their "
          "calls answered from the journal).")
    print()



LAT = (b"export default { async fetch(req) { const t = Number(await req.text()); "
       b"console.log('lat ' + (Date.now() - t)); return new Response('ok'); } };")
HIT = ("export default { async fetch(req) { await fetch('http://%s/hit/' + "
       "new URL(req.url).pathname.slice(1) + '/' + await req.text()); "
       "return new Response('ok'); } };" % UP).encode()
ASYNC = {"hearth-invocation-type": "Event"}


def burst(addr, tok, path, n, headers=None):
    """n calls of path on 16 connections; the statuses."""
    def one(chunk):
        cl = Client(addr, tok)
        return [cl.call("POST", path, str(i).encode(), headers)[0] for i in chunk]
    chunks = [range(k, n, 16) for k in range(16)]
    with ThreadPoolExecutor(16) as ex:
        return [s for part in ex.map(one, chunks) for s in part]


def hit_count(prefix):
    with hits_lock:
        return sum(1 for k in hits if k.startswith(prefix))


def async_vs_direct():
    a, addr, token = start(HEARTH, os.path.join(WORK, "async"), "--allow-private-egress", "true")
    deploy(addr, token, "lat", LAT, runtime="js", file_name="index.mjs")
    c = Client(addr, token)
    for _ in range(300):
        c.call("POST", "/fn/admin/lat", str(int(time.time() * 1000)).encode(), ASYNC)
        time.sleep(0.01)
    time.sleep(2)
    lat = [int(l["message"].split()[1]) for l in logs(addr, token, "lat")
           if l["message"].startswith("lat ")]
    deploy(addr, token, "hit", HIT, runtime="js", file_name="index.mjs", allow_host=UP)
    n = 3000
    t0 = time.time()
    statuses = burst(addr, token, "/fn/admin/hit/direct", n)
    direct_s = time.time() - t0
    assert all(s == 200 for s in statuses), collections.Counter(statuses)
    t0 = time.time()
    statuses = burst(addr, token, "/fn/admin/hit/queued", n, ASYNC)
    accepted_s = time.time() - t0
    assert all(s == 202 for s in statuses), collections.Counter(statuses)
    while hit_count("/hit/queued/") < n:
        time.sleep(0.05)
    queued_s = time.time() - t0
    a.send_signal(signal.SIGTERM)
    a.wait()
    print(f"### Async invocations: a js function calling a loopback server, one node, "
          f"16 connections, {os.cpu_count()} cores")
    print()
    print("| figure | value |")
    print("|---|---|")
    print(f"| enqueue → start, p50 / p99 (300 calls 10 ms apart) | {pct(lat, 50)} / {pct(lat, 99)} ms |")
    print(f"| direct HTTP, {n} calls | {n / direct_s:,.0f} inv/s |")
    print(f"| async, {n} calls: all accepted (202) | {n / accepted_s:,.0f} calls/s |")
    print(f"| async, {n} calls: all run | {n / queued_s:,.0f} inv/s |")
    print(f"| async ÷ direct (run) | {direct_s / queued_s:.2f} |")
    print()


def kill_with_queued():
    # Deployed, then started again with a tenant share of 1 MiB, which
    # refuses every run (a js function reserves 68): all QUEUED stay
    # queued, put back at each refusal, until the daemon is killed and
    # started again without it.
    work = os.path.join(WORK, "kill")
    k, addr, token = start(HEARTH, work, "--allow-private-egress", "true")
    deploy(addr, token, "hit", HIT, runtime="js", file_name="index.mjs", allow_host=UP)
    k.send_signal(signal.SIGTERM)
    k.wait()
    k, addr, token = start(HEARTH, work, "--allow-private-egress", "true",
                           "--capacity-mib-per-tenant", "1")
    statuses = burst(addr, token, "/fn/admin/hit/kill", QUEUED, ASYNC)
    assert all(s == 202 for s in statuses), collections.Counter(statuses)
    k.kill()
    k.wait()
    before = hit_count("/hit/kill/")
    restart = time.time()
    k, addr, token = start(HEARTH, work, "--allow-private-egress", "true")
    while time.time() - restart < 600 and hit_count("/hit/kill/") < QUEUED:
        time.sleep(0.05)
    drain_s = time.time() - restart
    time.sleep(10)
    with hits_lock:
        kill_hits = {p: n for p, n in hits.items() if p.startswith("/hit/kill/")}
    lost = QUEUED - len(kill_hits)
    twice = sum(1 for v in kill_hits.values() if v > 1)
    s, b = Client(addr, token).call("GET", "/v1/functions/hit/dlq")
    dead = len(json.loads(b)["dead"])
    k.send_signal(signal.SIGTERM)
    k.wait()
    print(f"### kill -9 with {QUEUED:,} acknowledged (202) async calls queued")
    print()
    print(f"{before:,} had run when the daemon was killed (its tenant's share refused every "
          f"run); after the restart all ran in **{drain_s:.1f} s** from the restart "
          f"(start-up included). **Lost: {lost}**; dead letters: {dead}; calls made twice: "
          f"{twice}.")


# The same KV write, awaited before the answer or left for after it.
AWAITED = (b"export default { async fetch(req, env) { "
           b"await env.hearth.kv.set('k' + await req.text(), 'v'); return new Response('ok'); } };")
DEFERRED = (b"export default { async fetch(req, env, ctx) { "
            b"ctx.waitUntil(env.hearth.kv.set('k' + await req.text(), 'v')); "
            b"return new Response('ok'); } };")


def after_response():
    """Response latency of a js function that awaits one KV write and of
    one that leaves it to waitUntil: ROUNDS rounds of CALLS sequential
    calls each, the two taking turns, compared per round."""
    import paired
    w, addr, token = start(HEARTH, os.path.join(WORK, "after"))
    for name, code in (("awaited", AWAITED), ("deferred", DEFERRED)):
        deploy(addr, token, name, code, runtime="js", file_name="index.mjs")
    c = Client(addr, token)
    rounds_n, calls = int(os.environ.get("ROUNDS", 10)), int(os.environ.get("CALLS", 300))
    rounds, every = [], {"awaited": [], "deferred": []}
    n, deferred_keys = 0, []
    for r in range(rounds_n + 1):
        got = {}
        for name in ("awaited", "deferred") if r % 2 else ("deferred", "awaited"):
            times = []
            for _ in range(calls):
                n += 1
                if name == "deferred":
                    deferred_keys.append(n)
                t0 = time.perf_counter()
                s, _ = c.call("POST", f"/fn/admin/{name}", str(n).encode())
                times.append((time.perf_counter() - t0) * 1e6)
                assert s == 200, s
            if r:  # the first round warms up
                got[name] = {"p50": statistics.median(times)}
                every[name] += times
        if r:
            rounds.append(got)
    # The deferred writes happened (a sample of 200 of them, and the last).
    time.sleep(1)
    import random
    sample = random.Random(1).sample(deferred_keys, 200) + [deferred_keys[-1]]
    written = sum(c.call("GET", f"/v1/functions/deferred/kv/k{k}")[0] == 200 for k in sample)
    w.send_signal(signal.SIGTERM)
    w.wait()
    ratio, lo, hi = paired.median_ci(paired.paired(rounds, "deferred", "awaited", "p50"))
    print(f"### Work after the response: one KV write awaited vs passed to waitUntil "
          f"(js isolate, one node, one connection, {os.cpu_count()} cores)")
    print()
    print("| function | p50 | p99 |")
    print("|---|---|---|")
    for name in ("awaited", "deferred"):
        xs = every[name]
        print(f"| {name} | {pct(xs, 50):,.0f} µs | {pct(xs, 99):,.0f} µs |")
    print(f"| deferred ÷ awaited, p50 per round ({rounds_n} rounds of {calls}) | "
          f"{ratio:.2f} (95% CI {lo:.2f}–{hi:.2f}) | |")
    print()
    print(f"Deferred writes found in KV a second later: {written} of a sample of "
          f"{len(sample)} (of {len(deferred_keys):,} made, the last included).")
    print()


# Each message's invocation: nothing but an answer (throughput), or a
# log line of how long after its publish time (the body) it started.
SINK = b"export default { async fetch() { return new Response('ok'); } };"
LATE = (b"export default { async fetch(req) { "
        b"console.log('late ' + (Date.now() - Number(await req.text()))); "
        b"return new Response('ok'); } };")


def nats_triggers():
    """NATS JetStream: messages a js function's binding runs per second
    against a raw pull consumer (async-nats, the same batch, an ack per
    message) on the same server, and publish → start latency."""
    import socket
    import urllib.parse
    n = int(os.environ.get("NATS_MSGS", 20000))
    tool_bin = os.path.join(BIN, "examples", "nats_bench")
    port = socket.create_server(("127.0.0.1", 0)).getsockname()[1]
    store = os.path.join(WORK, "nats")
    os.makedirs(store, exist_ok=True)
    srv = subprocess.Popen(["nats-server", "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", store],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    STARTED.append(srv)
    while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
        time.sleep(0.02)
    url = f"nats://127.0.0.1:{port}"

    def tool(*a):
        return subprocess.run([tool_bin, *a], check=True, capture_output=True,
                              text=True).stdout.strip()

    tool("publish", url, "RAW", "raw", str(n))
    raw = float(tool("raw", url, "RAW", str(n), "10"))
    raw_double = float(tool("raw", url, "RAW", str(n), "10", "double"))

    w, addr, token = start(HEARTH, os.path.join(WORK, "nats-hearth"),
                           "--broker-allow", f"127.0.0.1:{port}")
    c = Client(addr, token)

    def bind(name, code, stream):
        tool("publish", url, stream, stream.lower(), "0")
        trigger = urllib.parse.quote(f"{url}/{stream}?batch=10", safe="")
        deploy(addr, token, name, code, runtime="js", file_name="index.mjs", trigger=trigger)
        _, body = c.call("GET", f"/v1/functions/{name}/triggers")
        return f"hearth_admin_{name}_" + json.loads(body)["triggers"][0]["id"]

    sink = bind("sink", SINK, "HEARTH")
    tool("publish", url, "HEARTH", "hearth", str(n))
    hearth = float(tool("drain", url, "HEARTH", sink, str(n)))

    bind("late", LATE, "LAT")
    time.sleep(3)  # its consumer running
    tool("publish", url, "LAT", "lat", "300", "100")
    lat = []
    while len(lat) < 300:
        time.sleep(0.2)
        lat = [int(l["message"].split()[1]) for l in logs(addr, token, "late")
               if l["message"].startswith("late ")]
    w.send_signal(signal.SIGTERM)
    w.wait()
    print(f"### Queue triggers on NATS JetStream (nats-server {nats_version()}, loopback, "
          f"batch 10, a js function that answers at once, {os.cpu_count()} cores)")
    print()
    print("| figure | value |")
    print("|---|---|")
    print(f"| raw pull consumer (async-nats), {n:,} messages, ack each (as `nats bench`) | {raw:,.0f} msgs/s |")
    print(f"| the same, each ack confirmed by the server, one at a time | {raw_double:,.0f} msgs/s |")
    print(f"| Hearth binding, {n:,} messages, an invocation and a confirmed ack each | {hearth:,.0f} msgs/s |")
    print(f"| Hearth ÷ raw | {hearth / raw:.2f} |")
    print(f"| Hearth ÷ raw with confirmed acks | {hearth / raw_double:.2f} |")
    print(f"| publish → start, p50 / p99 (300 messages, 100/s) | {pct(lat, 50)} / {pct(lat, 99)} ms |")
    print()


def nats_version():
    out = subprocess.run(["nats-server", "--version"], capture_output=True, text=True).stdout
    return out.strip().split()[-1].lstrip("v")


if "schedules" in PARTS:
    schedules()
if "async" in PARTS:
    async_vs_direct()
if "after" in PARTS:
    after_response()
if "kill" in PARTS:
    kill_with_queued()
if "nats" in PARTS:
    nats_triggers()
