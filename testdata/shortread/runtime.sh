#!/usr/bin/env bash
# runtime.sh DIR ROUNDS DURATION: GODEBUG=netpollshortread=1 against stock
# go1.26.8 and the patched toolchain with no setting, across processes: an
# unmodified package net server (cmd/httpserver -impl net for net/http
# plaintext over keep-alive, cmd/echoserver -impl net for echo) pinned to
# CPU 0 (GOMAXPROCS=1), cmd/loadgen pinned to CPU 1, a fresh server per
# measurement, configurations interleaved round by round, the server's
# syscalls counted with perf stat over the measured window. DIR holds the
# binaries, built from the repository root with
#   go build -o DIR/http-stock ./cmd/httpserver                           # stock go1.26.8
#   go build -o DIR/echo-stock ./cmd/echoserver
#   G=$HOME/.cache/edgepoll/go1.26.8-edgepoll/bin/go
#   $G build -o DIR/http-patched ./cmd/httpserver
#   $G build -o DIR/echo-patched ./cmd/echoserver
#   go build -o DIR/loadgen ./cmd/loadgen
# and receives DIR/runtime.txt (Go benchmark lines, labels cfg=, proto=,
# conns=, size=). Run it alone on the machine.
set -euo pipefail
dir=${1:?usage: runtime.sh DIR ROUNDS DURATION}; rounds=${2:-6}; dur=${3:-1s}
cells=${CELLS:-"http:1:64 http:50:64 echo:1:64 echo:50:64 echo:1:4096 echo:50:4096"}
configs=${CONFIGS:-"stock none shortread"}
warm=500ms
out=$dir/runtime.txt
: > "$out"
for r in $(seq "$rounds"); do
  for cell in $cells; do
    IFS=: read -r proto conns size <<<"$cell"
    for cfg in $configs; do
      bin=$dir/$proto-patched; godebug=
      case $cfg in
        stock) bin=$dir/$proto-stock ;;
        none) ;;
        shortread) godebug=netpollshortread=1 ;;
      esac
      so=$(mktemp); pf=$(mktemp)
      GODEBUG=$godebug taskset -c 0 "$bin" -impl net -addr 127.0.0.1:0 -lifetime 60s >"$so" 2>/dev/null &
      spid=$!
      for _ in $(seq 100); do grep -q listening "$so" && break; sleep 0.05; done
      addr=$(sed -n 's/^[a-z]* listening on \([^ ]*\) .*/\1/p' "$so")
      ( sleep "${warm%ms}e-3"; perf stat -x, -e raw_syscalls:sys_enter -p "$spid" -o "$pf" -- sleep "${dur%s}" ) &
      ppid=$!
      line=$(taskset -c 1 "$dir/loadgen" -addr "$addr" -proto "$proto" -conns "$conns" -size "$size" \
        -duration "$dur" -warmup "$warm" -server-pid "$spid" -format bench -name BenchmarkRuntime \
        -labels "cfg=$cfg/proto=$proto/conns=$conns/size=$size" 2>/dev/null | grep '^Benchmark' || true)
      wait "$ppid" || true
      if [ -z "$line" ]; then
        echo "round $r $cfg $cell: FAILED" >&2
      else
        n=$(awk '{print $2}' <<<"$line")
        sc=$(awk -F, '/raw_syscalls:sys_enter/ {print $1}' "$pf")
        if [ -n "$sc" ] && [ "$n" -gt 0 ]; then
          line+=$(awk -v s="$sc" -v n="$n" 'BEGIN { printf "\t%.3f syscalls/op", s / n }')
        fi
        echo "$line" >> "$out"
      fi
      kill -INT "$spid"; wait "$spid" 2>/dev/null || true
      rm -f "$so" "$pf"
    done
  done
  echo "round $r done" >&2
done
