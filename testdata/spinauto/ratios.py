#!/usr/bin/env python3
"""ratios.py FILE A/B...: per-round ratios of configuration A to B.

FILE holds Go benchmark lines whose names carry cfg=NAME among key=value
parts, written round by round (netpollbench's raw.txt and sweep.txt,
runtime.sh's runtime.txt). A line's cell is its conns=, size=, rate= and
load= labels; the n-th line of a cell and configuration is round n. For each cell, pair
and metric it prints the median of the per-round ratios A/B and their
range: ratios within a round cancel the host's drift between rounds.
"""
import collections, re, statistics, sys

METRICS = ("ns/op", "p50-ns", "p99-ns", "server-cpu-ns/op", "syscalls/op")
CELL_KEYS = ("proto", "conns", "size", "rate", "load")  # the other labels describe the configuration


def main(path, pairs):
    seen = collections.Counter()
    rounds = collections.defaultdict(dict)
    for line in open(path):
        if not line.startswith("Benchmark"):
            continue
        f = line.split()
        cfg = re.search(r"cfg=([^/]+)", f[0]).group(1)
        cell = "/".join(p for p in f[0].split("/")[1:] if p.split("=")[0] in CELL_KEYS)
        m = {f[i + 1]: float(f[i]) for i in range(2, len(f) - 1, 2)}
        rounds[(cell, seen[(cell, cfg)])][cfg] = m
        seen[(cell, cfg)] += 1
    out = collections.defaultdict(list)
    for (cell, _), by in rounds.items():
        for a, b in pairs:
            for met in METRICS:
                if a in by and b in by and by[b].get(met, 0) > 0 and met in by[a]:
                    out[(cell, f"{a}/{b}", met)].append(by[a][met] / by[b][met])
    for key in sorted(out):
        v = out[key]
        print(f"{key[0]:40s} {key[1]:14s} {key[2]:17s} {statistics.median(v):6.3f}  [{min(v):.2f}, {max(v):.2f}] n={len(v)}")


if __name__ == "__main__":
    main(sys.argv[1], [tuple(p.split("/")) for p in sys.argv[2:]])
