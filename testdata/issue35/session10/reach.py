#!/usr/bin/env python3
"""How far below package net the Server would have to be for the issue's
Server target (CPU per request <= 1.0x net's in every cell, in two runs) to
be met by the measure, given the spread the runs show.

For each run and cell: the sd of the per-round log ratio (Server's CPU per
request over net's, paired within the round) and the rounds n give the
standard error of the run's geometric mean, se = sd/sqrt(n). A Server whose
true ratio is r in every cell meets the target in that run's cell when the
measured geometric mean is <= 1.0, with probability Phi(-ln(r)/se)
(normal approximation of the mean log ratio). The target needs every cell
of every run given: the product. Printed: that probability for a few r,
and the r at which it reaches 50% and 80%.

With -rounds N it assumes each run had N rounds with the same per-round
spread (se scaled by sqrt(n/N)): what the target needs with longer runs.

Caveats: at r = 1.0 every cell passes with probability 1/2 whatever the
spread, so P there is 0.5 to the number of cells. The product treats the
cells as independent; a shift shared by a run's cells (the host's speed)
would correlate them and make passing every cell more likely than the
product says, though pairing within rounds takes most of such a shift
out.

usage: reach.py [-cfg NAME] [-rounds N] RUNDIR... (NAME: ondemand by default)"""
import json, math, re, sys
from collections import defaultdict

def cpu(line):
    m = re.search(r'cfg=([^/\s]+)', line)
    for p in line.split('\t')[2:]:
        v, _, unit = p.strip().partition(' ')
        if unit == 'server-cpu-ns/op':
            return m.group(1) if m else None, float(v)
    return (m.group(1) if m else None), None

def spreads(run, cfg):
    t = json.load(open(run + '/table.json'))
    rounds = defaultdict(dict)
    for r in t['Results']:
        c, v = cpu(r['Line'])
        if v:
            rounds[(r['Cell'], r['Round'])][c] = v
    out = []
    for ci, cell in enumerate(t['Cells']):
        if cell['Kind'] != 'load' or cell.get('Blocked'):
            continue  # the idle experiment, the blocked neighbour
        logs = [math.log(by[cfg] / by['net']) for (cc, rd), by in rounds.items()
                if cc == ci and cfg in by and 'net' in by and not (rd == 0 and cell.get('Warm'))]
        if len(logs) < 2:
            continue
        n = len(logs)
        mean = sum(logs) / n
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
        desc = '%s conns=%s rate=%s unpinned=%s' % (cell['Kind'], cell['Conns'], cell['Rate'], cell['Unpinned'])
        out.append((desc, n, math.exp(mean), sd / math.sqrt(n)))
    return out

def phi(x):
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))

def main():
    args, cfg, rounds = sys.argv[1:], 'ondemand', 0
    while args[:1] in (['-cfg'], ['-rounds']):
        if args[0] == '-cfg':
            cfg = args[1]
        else:
            rounds = int(args[1])
        args = args[2:]
    cells = []
    for run in args:
        for desc, n, gm, se in spreads(run, cfg):
            print('%-40s %-44s n=%2d  measured %.2fx  se of the mean %.3f' % (run, desc, n, gm, se))
            cells.append(se * math.sqrt(n / rounds) if rounds else se)
    if rounds:
        print('\nscaled to %d rounds per run' % rounds)
    def p_all(r):
        return math.prod(phi(-math.log(r) / se) for se in cells)
    print('\n%d run-cells. P(every one measures <= 1.0x) for a true ratio r in every cell:' % len(cells))
    for r in (1.0, 0.97, 0.95, 0.93, 0.90, 0.85, 0.80):
        print('  r = %.2f  P = %.3f' % (r, p_all(r)))
    for want in (0.5, 0.8):
        lo, hi = 0.5, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if p_all(mid) >= want:
                lo = mid
            else:
                hi = mid
        print('  P = %.0f%% needs r <= %.3f' % (100 * want, lo))

main()
