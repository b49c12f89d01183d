#!/bin/bash
# perfpin.sh NAME BIN conns -- args : server pinned CPU 0, loadgen CPU 1
name=$1; bin=$2; conns=$3; shift 4
taskset -c 0 ./$bin -addr 127.0.0.1:7777 -lifetime 12s "$@" 2>/dev/null > /dev/null &
sp=$!
sleep 0.5
taskset -c 1 ./loadgen -addr 127.0.0.1:7777 -conns $conns -duration 8s -warmup 1s -server-pid $sp > /tmp/prof/$name.out 2>/dev/null &
lp=$!
sleep 3
perf record -e cpu-clock -F 2000 -g -p $sp -o /tmp/prof/$name.perf -- sleep 4 2>/dev/null >/dev/null
wait $lp; wait $sp
k=$(perf report -i /tmp/prof/$name.perf --no-children --sort dso --stdio -g none 2>/dev/null | grep kernel.kallsyms | awk '{print $1}' | tr -d %)
cpu=$(grep 'server cpu' /tmp/prof/$name.out | awk '{print $3}' | tr -d 'µs/op')
echo "$name cpu=${cpu}us kernel=${k}% user=$(python3 -c "print(round($cpu*(100-$k)/100,3))")us $(grep -o '([0-9]*/s)' /tmp/prof/$name.out)"
