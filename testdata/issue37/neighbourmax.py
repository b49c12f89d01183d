import sys, re, collections
# neighbourmax.py neighbour.txt: per round (the k-th line of each configuration), the pinger's max round
# trip of each configuration against package net's in the same round.
rows=collections.defaultdict(list)
for l in open(sys.argv[1]):
    if not l.startswith('BenchmarkEcho/'): continue
    cfg=re.search(r'cfg=([^/]+)',l).group(1)
    mx=int(re.search(r'(\d+) max-ns',l).group(1)); p99=int(re.search(r'(\d+) p99-ns',l).group(1))
    rows[cfg].append((p99,mx))
net=rows['net']
for c,v in rows.items():
    print(f"{c:12s} max us by round: " + " ".join(f"{m/1000:.0f}" for _,m in v) +
          "   max/(2x net max) by round: " + " ".join(f"{m/(2*n[1]):.2f}" for (_,m),n in zip(v,net)))
