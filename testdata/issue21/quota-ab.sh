#!/bin/bash
# quota-ab.sh ROUNDS DUR: "bin:spin" variants in $VARS, echoserver pinned to CPU 0 in a 0.5-CPU cgroup
# (../shared/tools/cpuquota), loadgen on CPU 1, 1 conn closed loop; interleaved round by round.
rounds=$1; dur=$2
life=$(awk -v d="${dur%s}" 'BEGIN{printf "%.1fs", d+1.5}')
for r in $(seq $rounds); do
  for vs in $VARS; do
    v=${vs%%:*}; sp=${vs##*:}
    taskset -c 0 /work/shared/tools/cpuquota 0.5 /tmp/meas/echo-$v -impl netpoll -spin $sp -lifetime $life -stats > /tmp/meas/q.out 2> /tmp/meas/q.err &
    w=$!
    for i in $(seq 100); do addr=$(grep -o '127.0.0.1:[0-9]*' /tmp/meas/q.out | head -1); [ -n "$addr" ] && break; sleep 0.02; done
    res=$(taskset -c 1 /tmp/meas/loadgen -addr $addr -conns 1 -duration $dur -warmup 300ms 2>/dev/null)
    wait $w
    rps=$(echo "$res" | grep -o '([0-9]*/s)' | tr -d '()/s')
    lat=$(echo "$res" | grep '^latency' | grep -o 'p99.9 [^ ]*\|max [^ ]*' | tr ' ' '=' | tr '\n' ' ')
    echo "r$r $vs rps=$rps $lat $(grep -o 'cpuquota: .*' /tmp/meas/q.err | cut -d' ' -f3-) $(grep -o 'spin-decisions=[0-9]*\|spin-refused=[0-9]*' /tmp/meas/q.err | tr '\n' ' ')"
  done
done
