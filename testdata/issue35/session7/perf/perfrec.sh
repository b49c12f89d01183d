#!/bin/bash
# perfrec.sh NAME BIN conns -- args
name=$1; bin=$2; conns=$3; shift 4
./$bin -addr 127.0.0.1:7777 -lifetime 12s "$@" 2>/dev/null > /tmp/prof/$name.ann &
sp=$!
sleep 0.5
./loadgen -addr 127.0.0.1:7777 -conns $conns -duration 8s -warmup 1s -server-pid $sp > /tmp/prof/$name.out &
lp=$!
sleep 3
perf record -e cpu-clock -F 2000 -g -p $sp -o /tmp/prof/$name.perf -- sleep 4 2>/dev/null >/dev/null
wait $lp; wait $sp
grep -E 'requests|server cpu' /tmp/prof/$name.out
