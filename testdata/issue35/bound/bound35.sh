#!/bin/bash
# bound35.sh ROUNDS CONNS OUT : issue 35's lower bound. Paired rounds (random order within a
# round) of echoserver configurations, unpinned, closed loop, -conns CONNS, 64 B:
#   net              package net
#   ondemand         netpoll.Server as on main (the watch port's arm/disarm per out period)
#   ondemand-noarm   the same binary with HACK_NOARM=1: no arm and no disarm, so no watchdog
#                    at all (unsafe: a blocking handler would stall the poller; echo never blocks)
#   ondemand-timer   HACK_TIMER=1: the port armed lazily, by a 1ms timer reset at each go-out and
#                    stopped at each come-back (the timer watchdog's cost: two timer operations)
#   ondemand-nospin  -spin 0
#   ondemand-noarm-nospin
# Binaries: /tmp/prof/echoserver-hack (branch issue35-timer, main + the HACK_NOARM switch),
# /tmp/prof/loadgen. Lines: round config req/s cpu_us_per_op
R=$1; C=$2; OUT=$3; : > $OUT
cfgs=(net ondemand ondemand-noarm ondemand-timer ondemand-nospin ondemand-noarm-nospin)
for r in $(seq $R); do
 for c in $(printf '%s\n' "${cfgs[@]}" | shuf); do
  env=(); args=(-ondemand)
  case $c in
   net) args=(-impl net);;
   ondemand-noarm) env=(HACK_NOARM=1);;
   ondemand-timer) env=(HACK_TIMER=1);;
   ondemand-nospin) args=(-ondemand -spin 0);;
   ondemand-noarm-nospin) env=(HACK_NOARM=1); args=(-ondemand -spin 0);;
  esac
  rm -f /tmp/prof/b.srv
  env "${env[@]}" /tmp/prof/echoserver-hack -addr 127.0.0.1:0 -lifetime 60s "${args[@]}" > /tmp/prof/b.srv 2>/dev/null &
  pid=$!
  for i in $(seq 50); do addr=$(grep -o '127.0.0.1:[0-9]*' /tmp/prof/b.srv | head -1); [ -n "$addr" ] && break; sleep 0.1; done
  [ -z "$addr" ] && { echo "no server for $c" >&2; exit 1; }
  out=$(/tmp/prof/loadgen -addr $addr -conns $C -duration 2s -warmup 500ms -server-pid $pid 2>&1)
  rps=$(echo "$out" | grep -o '([0-9]*/s)' | tr -d '(/s)')
  cpu=$(echo "$out" | grep -o 'server cpu *[0-9.]*µs/op' | grep -o '[0-9.]*')
  echo "$r $c $rps $cpu" | tee -a $OUT
  kill -INT $pid; wait $pid 2>/dev/null
 done
done
python3 - $OUT <<'PY'
import sys, math, collections, statistics
rows=[l.split() for l in open(sys.argv[1])]
d=collections.defaultdict(dict)
for row in rows:
  if len(row)==4: r,c,rps,cpu=row; d[c][r]=(float(rps),float(cpu))
t={2:12.71,3:4.30,4:3.18,5:2.78,6:2.57,7:2.45,8:2.36,9:2.31,10:2.26,11:2.23,12:2.20}
for c in d:
  if c=='net': continue
  for k,name in ((1,'CPU/req'),(0,'req/s')):
    ls=[math.log(d[c][r][k]/d['net'][r][k]) for r in d[c] if r in d['net']]
    m=statistics.mean(ls); s=statistics.stdev(ls)/math.sqrt(len(ls)); h=t.get(len(ls)-1,2.0)*s
    print(f"{c:24s} {name:8s} vs net {math.exp(m):.2f}x [{math.exp(m-h):.2f},{math.exp(m+h):.2f}] n={len(ls)}")
for c in d:
  print(f"{c:24s} mean req/s {statistics.mean(v[0] for v in d[c].values()):.0f} CPU/req {statistics.mean(v[1] for v in d[c].values()):.2f}us")
PY
