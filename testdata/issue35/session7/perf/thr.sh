#!/bin/bash
# thr.sh ENV BIN args: per-thread ctxsw over 2 s of a 1-conn unpinned load
env $1 ./$2 -addr 127.0.0.1:7778 -lifetime 7s "${@:3}" 2>/dev/null >/dev/null & sp=$!
sleep 0.5
./loadgen -addr 127.0.0.1:7778 -conns 1 -duration 5s -warmup 1s -server-pid $sp > /tmp/prof/thr.out 2>/dev/null &
lp=$!
sleep 2.5
snap() { for t in /proc/$sp/task/*; do echo "$(basename $t) $(grep -E '^voluntary|^nonvoluntary' $t/status | awk '{print $2}' | paste -sd' ') $(awk '{print $14+$15}' $t/stat)"; done; }
snap > /tmp/prof/s1; sleep 2; snap > /tmp/prof/s2
wait $lp; wait $sp
rps=$(grep -o '([0-9]*/s)' /tmp/prof/thr.out | tr -d '(/s)')
join /tmp/prof/s1 /tmp/prof/s2 | awk -v r=$rps '{v=($5-$2)/(2*r); n=($6-$3)/(2*r); c=($7-$4); if (v+n>0.001 || c>0) printf "tid %s vol/req %.3f invol/req %.3f cputicks %d\n", $1, v, n, c}'
echo "rps $rps"
