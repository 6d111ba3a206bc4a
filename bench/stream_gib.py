"""Streams 1 GiB through URL (curl -T - from /dev/zero: chunked, read back
as it comes) while sampling PID's resident memory every 10 ms.

Usage: python3 bench/stream_gib.py PID URL
Prints `MB/s:peak RSS rise in MiB`; fails unless all of it came back."""
import subprocess
import sys
import threading
import time

pid, url = int(sys.argv[1]), sys.argv[2]
size = 1 << 30


def rss_kib():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])


base = rss_kib()
peak, done = [base], threading.Event()


def watch():
    while not done.is_set():
        peak[0] = max(peak[0], rss_kib())
        time.sleep(0.01)


threading.Thread(target=watch, daemon=True).start()
start = time.monotonic()
body = subprocess.Popen(["head", "-c", str(size), "/dev/zero"], stdout=subprocess.PIPE)
out = subprocess.run(
    ["curl", "-sS", "-T", "-", "-X", "POST", "-o", "/dev/null", "-w", "%{size_download} %{http_code}", url],
    stdin=body.stdout,
    capture_output=True,
    text=True,
).stdout.split()
elapsed = time.monotonic() - start
done.set()
if out != [str(size), "200"]:
    sys.exit(f"{url}: {out}")
print(f"{size / elapsed / 1e6:.1f}:{(peak[0] - base) / 1024:.1f}")
