#!/usr/bin/env bash
# runtime.sh DIR ROUNDS DURATION: GODEBUG=netpollspin=auto against stock
# go1.26.8 and the fixed setting, across processes: cmd/echoserver -impl net
# pinned to CPU 0 (GOMAXPROCS=1), cmd/loadgen pinned to CPU 1, a fresh
# server per measurement, configurations interleaved round by round. DIR
# holds the binaries, built from the repository root with
#   go build -o DIR/stock ./cmd/echoserver                               # stock go1.26.8
#   $HOME/.cache/edgepoll/go1.26.8-edgepoll/bin/go build -o DIR/patched ./cmd/echoserver
#   go build -o DIR/loadgen ./cmd/loadgen
# and receives DIR/runtime.txt (Go benchmark lines, labels cfg= and load=).
# Run it alone on the machine.
set -euo pipefail
dir=${1:?usage: runtime.sh DIR ROUNDS DURATION}; rounds=${2:-6}; dur=${3:-1s}
cells=${CELLS:-"1:0 1:2000 1:10000 1:30000 50:0"}
configs=${CONFIGS:-"stock none spin50 auto"}
out=$dir/runtime.txt
: > "$out"
for r in $(seq "$rounds"); do
  for cell in $cells; do
    conns=${cell%%:*}; rate=${cell##*:}
    load=$rate; [ "$rate" = 0 ] && load=closed
    for cfg in $configs; do
      bin=$dir/patched; godebug=
      case $cfg in
        stock) bin=$dir/stock ;;
        none) ;;
        spin50) godebug=netpollspin=50 ;;
        auto) godebug=netpollspin=auto ;;
      esac
      so=$(mktemp)
      GODEBUG=$godebug taskset -c 0 "$bin" -impl net -addr 127.0.0.1:0 -lifetime 60s >"$so" 2>/dev/null &
      spid=$!
      for _ in $(seq 100); do grep -q listening "$so" && break; sleep 0.05; done
      addr=$(sed -n 's/^echoserver listening on \([^ ]*\) .*/\1/p' "$so")
      taskset -c 1 "$dir/loadgen" -addr "$addr" -conns "$conns" -size 64 -duration "$dur" -warmup 500ms \
        -rate "$rate" -server-pid "$spid" -format bench -name BenchmarkEcho -labels "cfg=$cfg/load=$load" 2>/dev/null |
        grep '^Benchmark' >> "$out" || echo "round $r $cfg $cell: FAILED" >&2
      kill -INT "$spid"; wait "$spid" 2>/dev/null || true
      rm -f "$so"
    done
  done
  echo "round $r done" >&2
done
