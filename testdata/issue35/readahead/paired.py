#!/usr/bin/env python3
"""Paired ratios against package net from a netpollbench run's table.json:
per cell, per configuration, the geometric mean over rounds of
figure/net's-figure in the same round, with a 95% t-interval of the mean
log ratio (netpollbench's own verdict, for the measures it does not show).
usage: paired.py RUNDIR [-base NAME] [metric ...] (NAME: the configuration
the ratios are over, net by default); metrics: cpu (server-cpu-ns/op),
rps (1e9/ns/op), sys (syscalls/op), max (max-ns), p99 (p99-ns)."""
import json, math, re, sys
from collections import defaultdict

T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
       10: 2.23, 11: 2.20, 12: 2.18, 13: 2.16, 14: 2.14, 15: 2.13, 16: 2.12, 17: 2.11}

def fields(line):
    parts = line.split('\t')
    name, out = parts[0], {}
    for p in parts[2:]:
        v, _, unit = p.strip().partition(' ')
        try:
            out[unit] = float(v)
        except ValueError:
            pass
    m = re.search(r'cfg=([^/]+)', name)
    return (m.group(1) if m else name), out

def metric(f, m):
    return {'cpu': f.get('server-cpu-ns/op'), 'rps': 1e9 / f['ns/op'] if f.get('ns/op') else None,
            'sys': f.get('syscalls/op'), 'max': f.get('max-ns'), 'p99': f.get('p99-ns')}[m]

def main():
    run, args, base = sys.argv[1], sys.argv[2:], 'net'
    if args[:1] == ['-base']:
        base, args = args[1], args[2:]
    metrics = args or ['cpu', 'rps']
    t = json.load(open(run + '/table.json'))
    rounds = defaultdict(dict)  # (cell, round) -> cfg -> fields
    for r in t['Results']:
        cfg, f = fields(r['Line'])
        rounds[(r['Cell'], r['Round'])][cfg] = f
    for ci, cell in enumerate(t['Cells']):
        desc = '%s conns=%s rate=%s unpinned=%s blocked=%s' % (cell['Kind'], cell['Conns'], cell['Rate'], cell['Unpinned'], cell['Blocked'])
        cfgs = [s['Name'] for s in cell['Servers']]
        if base not in cfgs:
            continue
        print(desc)
        for m in metrics:
            for c in cfgs:
                if c == base:
                    continue
                logs = []
                for (cc, rd), by in rounds.items():
                    if cc != ci or c not in by or base not in by or (rd == 0 and cell.get('Warm')):
                        continue  # round 0 of a warmed cell is netpollbench's discarded warm-up
                    a, b = metric(by[c], m), metric(by[base], m)
                    if a and b:
                        logs.append(math.log(a / b))
                n = len(logs)
                if n < 2:
                    continue
                mean = sum(logs) / n
                sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
                h = T95.get(n - 1, 2.0) * sd / math.sqrt(n)
                print('  %-4s %-10s %.2fx [%.2f,%.2f] n=%d' % (m, c, math.exp(mean), math.exp(mean - h), math.exp(mean + h), n))

main()
