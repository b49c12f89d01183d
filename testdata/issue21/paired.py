import re,sys,math,statistics as st
# paired ratios within rounds: A/B for metrics, from a netpollbench file with "round: N" lines
f=sys.argv[1]; pairs=[p.split('/') for p in sys.argv[2].split(',')]; metrics=sys.argv[3].split(',')
rnd=None; data={}
for line in open(f):
    m=re.match(r'round: (\d+)',line)
    if m: rnd=int(m.group(1)); continue
    if line.startswith('Benchmark'):
        cfg=re.search(r'cfg=([^/]+)',line).group(1)
        toks=line.split()
        vals={toks[i+1]:float(toks[i]) for i in range(2,len(toks)-1,2)}
        vals['req/s']=1e9/float(toks[2].split()[0]) if False else None
        data.setdefault(rnd,{})[cfg]=vals
T={5:2.571,6:2.447,7:2.365,8:2.306,9:2.262,10:2.228}
for a,b in pairs:
    for mt in metrics:
        r=[data[k][a][mt]/data[k][b][mt] for k in data if a in data[k] and b in data[k] and data[k][b].get(mt)]
        lg=[math.log(x) for x in r]; n=len(lg); m=st.mean(lg); s=st.stdev(lg)/math.sqrt(n); t=T.get(n-1,2.0)
        print(f'{a}/{b} {mt:14s} n={n} {math.exp(m):.2f}x [{math.exp(m-t*s):.2f},{math.exp(m+t*s):.2f}]  per round: '+' '.join(f'{x:.2f}' for x in r))
