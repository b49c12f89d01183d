#!/bin/bash
# ab2.sh ROUNDS DUR RATE : variants "bin:spin" in $VARS, pinned, interleaved
rounds=$1; dur=$2; rate=$3
for r in $(seq $rounds); do
  for vs in $VARS; do
    v=${vs%%:*}; sp=${vs##*:}
    taskset -c 0 /tmp/meas/echo-$v -impl netpoll -spin $sp -addr 127.0.0.1:0 -stats > /tmp/meas/srv.out 2> /tmp/meas/srv.err &
    pid=$!
    for i in $(seq 50); do addr=$(grep -o '127.0.0.1:[0-9]*' /tmp/meas/srv.out | head -1); [ -n "$addr" ] && break; sleep 0.05; done
    res=$(taskset -c 1 /tmp/meas/loadgen -addr $addr -conns 1 -rate $rate -duration $dur -warmup 300ms -server-pid $pid 2>/dev/null)
    kill -INT $pid; wait $pid 2>/dev/null
    rps=$(echo "$res" | grep -o '([0-9]*/s)' | tr -d '()/s')
    p50=$(echo "$res" | grep -o 'p50 [^ ]*' | head -1 | cut -d' ' -f2)
    cpu=$(echo "$res" | grep 'server cpu' | awk '{print $3}')
    echo "r$r $vs rps=$rps p50=$p50 cpu=$cpu $(grep -o 'spin-decisions=[0-9]*\|block-cost=[^ ]*' /tmp/meas/srv.err | tr '\n' ' ')"
  done
done
