#!/usr/bin/env python3
"""ratios.py RAW: per-round ratios of testdata/zerocopy/run.sh's output.

For each cell, the median over rounds (and the range) of B/A throughput
and B/A server CPU per GiB, for the pairs (before, after) = (netpoll-copy,
netpoll), (net, netpoll) and (net-copy, net). Rounds are taken in file
order: run.sh writes every configuration once per round, so the i-th line
of a configuration in a cell belongs to round i.
"""
import collections
import re
import statistics
import sys

per = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r'BenchmarkZeroCopy/what=(\w+)/cfg=([\w-]+)\s+\d+\s+([\d.]+) MiB/s\s+([\d.]+) server-cpu-ms/GiB', line)
    if m:
        per[(m[1], m[2])].append((float(m[3]), float(m[4])))
cells = sorted({w for w, _ in per}, key=lambda w: (w.startswith('proxy'), len(w), w))
for what in cells:
    for a, b in [('netpoll-copy', 'netpoll'), ('net', 'netpoll'), ('net-copy', 'net')]:
        pairs = list(zip(per[(what, a)], per[(what, b)]))
        if not pairs:
            continue
        tp = [y[0] / x[0] for x, y in pairs]
        cpu = [y[1] / x[1] for x, y in pairs]
        print(f'{what:9} {b}/{a}: throughput x{statistics.median(tp):.2f} [{min(tp):.2f}, {max(tp):.2f}]'
              f'  CPU/GiB x{statistics.median(cpu):.2f} [{min(cpu):.2f}, {max(cpu):.2f}]  n={len(pairs)}')
