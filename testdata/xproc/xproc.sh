#!/usr/bin/env bash
# xproc.sh OUT ROUNDS DURATION -- CELL...
# Cross-process echo: server pinned to CPU 0, loadgen pinned to CPU 1;
# configurations interleaved round by round. A CELL is
# "label|server flags|conns|size".
set -u
out=$1 rounds=$2 dur=$3; shift 4
: > "$out"
for r in $(seq "$rounds"); do
  for cell in "$@"; do
    IFS='|' read -r label sflags conns size <<<"$cell"
    so=$(mktemp /tmp/m/srv.XXXXXX)
    taskset -c 0 /tmp/m/echoserver $sflags -addr 127.0.0.1:0 -lifetime 300s > "$so" 2>&1 &
    spid=$!
    for i in $(seq 100); do grep -q listening "$so" && break; sleep 0.05; done
    addr=$(sed -n 's/^echoserver listening on \([^ ]*\) .*/\1/p' "$so")
    rm -f "$so"
    taskset -c 1 /tmp/m/loadgen -addr "$addr" -conns "$conns" -size "$size" -duration "$dur" -warmup 1s \
      -server-pid "$spid" -format bench -labels "$label" 2>>/tmp/m/lg.err | grep '^Benchmark' >> "$out"
    kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
  done
done
