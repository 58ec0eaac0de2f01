#!/usr/bin/env python3
# Times GET /words/{word} of `kshard example wordcount run` members: each
# member asked N times over one keep-alive connection for a random word of
# the produced counts file; each answer is sorted by the Kshard-Member
# header into answered here or forwarded to the primary's member.
# Usage: scripts/query-latency.py COUNTS.json N HOST:PORT=MEMBER…
#   e.g. scripts/query-latency.py exp.json 2000 127.0.0.1:9601=a 127.0.0.1:9602=b
import http.client
import json
import random
import sys
import time

words = list(json.load(open(sys.argv[1]))["counts"].keys())
runs = int(sys.argv[2])
times = {}
for target in sys.argv[3:]:
    address, member = target.split("=")
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port))
    for _ in range(runs):
        started = time.perf_counter()
        connection.request("GET", f"/words/{random.choice(words)}")
        response = connection.getresponse()
        body = response.read()
        took = (time.perf_counter() - started) * 1000
        if response.status != 200:
            sys.exit(f"{address}: {response.status} {body!r}")
        kind = "here" if response.getheader("kshard-member") == member else "forwarded"
        times.setdefault(kind, []).append(took)
for kind, t in sorted(times.items()):
    t.sort()
    print(f"{kind}: {len(t)} reads, p50 {t[len(t) // 2]:.2f} ms, p99 {t[int(len(t) * 0.99)]:.2f} ms, max {t[-1]:.2f} ms")
