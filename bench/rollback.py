#!/usr/bin/env python3
"""How fast a rollback takes effect under load, and whether any request
fails meanwhile (issue 56).

Clients invoke TARGETS (function URLs, e.g. two gateways') in a loop on
keep-alive connections and keep, for every request, when it was sent,
the `Hearth-Version` that answered and the status. After a warm-up,
ROLLBACK (an alias's rollback URL) is called once; the load goes on.

Reported, per run:
  settle    from the rollback call returning to the send time of the last
            request still answered by the version rolled back from (0:
            every request sent after the call returned was answered by
            the version rolled back to)
  first     from the call starting to the send time of the first request
            answered by the version rolled back to
  call      the rollback call's own latency
  failed    requests that did not answer 200, over the whole run
  requests  how many were sent

Usage: bench/rollback.py TOKEN ROLLBACK_URL PROMOTE_URL OLD NEW TARGET... \
           [--clients 8] [--runs 5] [--seconds 1.5]
Each run rolls back (live NEW -> OLD), then promotes NEW again for the
next run. Prints one Markdown row per run and the medians.
"""

import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse


def connect(url):
    u = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=10), u.path


def load(target, stop, out):
    conn, path = connect(target)
    while not stop.is_set():
        sent = time.monotonic()
        try:
            conn.request("POST", path, body=b"x")
            resp = conn.getresponse()
            resp.read()
            out.append((sent, resp.getheader("hearth-version"), resp.status))
        except OSError:
            out.append((sent, None, 0))
            conn.close()
            conn, path = connect(target)
    conn.close()


def call(url, token, body=None):
    conn, path = connect(url)
    headers = {"Authorization": f"Bearer {token}"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    conn.request("POST", path, body=data, headers=headers)
    resp = conn.getresponse()
    text = resp.read()
    conn.close()
    if resp.status != 200:
        raise SystemExit(f"{url}: {resp.status} {text!r}")


def run(args, targets):
    stop = threading.Event()
    results = [[] for _ in range(args.clients)]
    threads = [
        threading.Thread(target=load, args=(targets[i % len(targets)], stop, results[i]))
        for i in range(args.clients)
    ]
    for t in threads:
        t.start()
    time.sleep(args.seconds / 2)
    began = time.monotonic()
    call(args.rollback, args.token)
    returned = time.monotonic()
    time.sleep(args.seconds / 2)
    stop.set()
    for t in threads:
        t.join()
    answers = [a for r in results for a in r]
    before = [a for a in answers if a[0] < began]
    assert before and all(a[1] == args.new for a in before if a[2] == 200), \
        "before the rollback, the new version should answer"
    old_after = [sent for (sent, version, status) in answers if sent >= returned and version != args.old]
    settle = max((s - returned for s in old_after), default=0.0)
    first = min(sent for (sent, version, _) in answers if version == args.old) - began
    failed = sum(1 for a in answers if a[2] != 200)
    # Live back at NEW for the next run.
    call(args.promote, args.token, {"version": int(args.new)})
    return settle * 1e3, (returned - began) * 1e3, first * 1e3, failed, len(answers)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("token")
    p.add_argument("rollback")
    p.add_argument("promote")
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("targets", nargs="+")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--seconds", type=float, default=1.5)
    args = p.parse_args()
    print("| run | settle ms | rollback call ms | first answer of the old version, ms | failed | requests |")
    print("|---|---|---|---|---|---|")
    rows = []
    for i in range(args.runs):
        row = run(args, args.targets)
        rows.append(row)
        print(f"| {i + 1} | {row[0]:.2f} | {row[1]:.2f} | {row[2]:.2f} | {row[3]} | {row[4]} |")
    med = [statistics.median(r[k] for r in rows) for k in range(3)]
    print(f"| median | **{med[0]:.2f}** | {med[1]:.2f} | {med[2]:.2f} | {sum(r[3] for r in rows)} (all runs) | |")


if __name__ == "__main__":
    main()
