#!/usr/bin/env python3
"""fewer.py FILE A/B...: per round, how many fewer syscalls per request A
makes than B (syscalls/op of B minus A), and A/B of server CPU and time
per request; prints the median over rounds and the range, per cell. FILE
holds Go benchmark lines with cfg= and cell labels (proto=, conns=, size=),
written round by round as netpollbench's raw.txt and runtime.sh's
runtime.txt are."""
import collections, re, statistics, sys

rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if not line.startswith("Benchmark"):
        continue
    f = line.split()
    cfg = re.search(r"cfg=([^/]+)", f[0]).group(1)
    cell = "/".join(dict.fromkeys(p for p in f[0].split("/")[1:] if p.split("=")[0] in ("proto", "conns", "size")))
    rows[(cell, cfg)].append({f[i + 1]: float(f[i]) for i in range(2, len(f) - 1, 2)})
for pair in sys.argv[2:]:
    a, b = pair.split("/")
    for cell in sorted({c for c, _ in rows}):
        ra, rb = rows.get((cell, a)), rows.get((cell, b))
        if not ra or not rb:
            continue
        d = [y["syscalls/op"] - x["syscalls/op"] for x, y in zip(ra, rb)]
        c = [x["server-cpu-ns/op"] / y["server-cpu-ns/op"] for x, y in zip(ra, rb)]
        t = [x["ns/op"] / y["ns/op"] for x, y in zip(ra, rb)]
        med = statistics.median
        print(f"{cell:28s} {pair:22s} fewer syscalls/req {med(d):5.2f} [{min(d):5.2f},{max(d):5.2f}]"
              f"  cpu/req {med(c):.3f} [{min(c):.2f},{max(c):.2f}]  time/req {med(t):.3f} [{min(t):.2f},{max(t):.2f}]  n={len(d)}")
