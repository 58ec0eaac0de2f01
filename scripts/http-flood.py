#!/usr/bin/env python3
"""Measures kshard's HTTP port under a flood of clients that never finish their request.

Usage: scripts/http-flood.py KSHARD_BINARY BROKERS [CONNECTIONS]

Starts `kshard serve` against BROKERS with its descriptor limit at 1,024 (ulimit -n), next to
`kshard demo` (groups that keep committing), waits until /ready is 200, then opens CONNECTIONS
(default 5,000) connections from 127.0.0.2 that each send half a request head and nothing more,
and prints, as KEY=VALUE lines:
- records_consumed_before/after: what kshard read of __consumer_offsets before and after the
  flood (lag kept updating: the demo's commits kept arriving);
- kafka_errors: log lines of kshard's Kafka clients that failed meanwhile (0 expected);
- closed_by_server, closed_within_s: of the flood's connections, how many kshard closed, and
  when the last was closed after the flood stopped sending (the header-read timeout is 10 s);
- scrape_at_flood_end_s: how long a GET /metrics made as the flood stops took.
It measures; it asserts nothing.
"""

import os
import resource
import select
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def get(port, path, timeout=30):
    start = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        body = r.read().decode()
        return r.status, body, time.monotonic() - start


def consumed(port):
    _, body, _ = get(port, "/metrics")
    for line in body.splitlines():
        if line.startswith("kshard_exporter_offset_consumer_records_consumed"):
            return int(float(line.split()[-1]))
    return -1


def main():
    binary, brokers = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 5000
    resource.setrlimit(resource.RLIMIT_NOFILE, (n + 1024, n + 1024))
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    # Only the flags here: no KSHARD_* setting of the caller's (KSHARD_ETCD would ask for a cluster).
    env = {k: v for k, v in os.environ.items() if not k.startswith("KSHARD_")}
    serve = subprocess.Popen(
        ["bash", "-c", f'ulimit -n 1024 && exec "$0" serve --brokers {brokers} --listen 127.0.0.1:{port}', binary],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    demo = subprocess.Popen([binary, "demo", "--brokers", brokers], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if get(port, "/ready", 5)[0] == 200:
                    break
            except Exception:
                pass
            if time.monotonic() > deadline:
                sys.exit("kshard was not ready within 120 s")
            time.sleep(0.2)
        time.sleep(5)
        before = consumed(port)
        flood = []
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            flood.append(s)
        time.sleep(1)
        for s in flood:
            try:
                s.send(b"GET /metrics HTTP/1.1\r\nHost: kshard\r\n")
            except OSError:
                pass
        sent_at = time.monotonic()
        time.sleep(3)
        # The flood stops sending; a scrape now.
        status, _, scrape = get(port, "/metrics")
        # Which of the flood kshard closes, and when.
        open_ = {s.fileno(): s for s in flood}
        closed, last_close = 0, 0.0
        poller = select.poll()
        for fd in open_:
            poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        until = time.monotonic() + 30
        while open_ and time.monotonic() < until:
            for fd, _ in poller.poll(200):
                s = open_.pop(fd, None)
                if s is None:
                    continue
                poller.unregister(fd)
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if not data or data.startswith(b"HTTP/1.1 408") or data.startswith(b"HTTP/1.1 4"):
                    closed += 1
                    last_close = time.monotonic() - sent_at
                s.close()
        time.sleep(6)
        after = consumed(port)
        log.flush()
        text = open(log.name).read()
        errors = [l for l in text.splitlines() if "Too many open files" in l or ("ERROR" in l and "kafka" in l.lower())]
        print(f"connections={n}")
        print(f"scrape_status={status}")
        print(f"scrape_at_flood_end_s={scrape:.3f}")
        print(f"closed_by_server={closed}")
        print(f"closed_within_s={last_close:.1f}")
        print(f"records_consumed_before={before}")
        print(f"records_consumed_after={after}")
        print(f"kafka_errors={len(errors)}")
        for l in errors[:5]:
            print(f"# {l}")
    finally:
        demo.terminate()
        serve.terminate()
        serve.wait(30)
        demo.wait(30)
        os.unlink(log.name)


if __name__ == "__main__":
    main()
