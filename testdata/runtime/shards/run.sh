#!/usr/bin/env bash
# run.sh DIR: netpollshards against stock, six rounds interleaved (the
# files beside this script). DIR holds the three binaries, built from the
# repository root with
#   go test -c -o DIR/stock.test ./bench                       # stock go1.26.8
#   $HOME/.cache/edgepoll/go1.26.8-edgepoll/bin/go test -c -o DIR/patched.test ./bench
#   (runtime_patch/check built by the patched toolchain as in verify.sh) -> DIR/check
# and receives the outputs. Run it alone on the machine.
set -euo pipefail
quiet=$(cd "$(dirname "$0")/../../../.." && pwd)/shared/tools/quiet
cd "${1:?usage: run.sh DIR (with stock.test, patched.test and check in it)}"
rm -f bench-*.txt netaccept*.txt herd.txt
"$quiet"
for r in 1 2 3 4 5 6; do
  ./stock.test -test.run '^$' -test.bench '^Benchmark(Echo|RPC)$/^impl=net$' -test.count 1 >> bench-stock.txt
  GODEBUG= ./patched.test -test.run '^$' -test.bench '^Benchmark(Echo|RPC)$/^impl=net$' -test.count 1 >> bench-none.txt
  GODEBUG=netpollshards=4 ./patched.test -test.run '^$' -test.bench '^Benchmark(Echo|RPC)$/^impl=net$' -test.count 1 >> bench-shards.txt
done
for cpu in 2 8; do
  for r in 1 2 3 4 5 6; do
    ./stock.test -test.run '^$' -test.bench '^BenchmarkNetAccept$' -test.benchtime 2000x -test.cpu $cpu -test.count 1 >> netaccept-stock.txt
    GODEBUG= ./patched.test -test.run '^$' -test.bench '^BenchmarkNetAccept$' -test.benchtime 2000x -test.cpu $cpu -test.count 1 >> netaccept-none.txt
    GODEBUG=netpollshards=4 ./patched.test -test.run '^$' -test.bench '^BenchmarkNetAccept$' -test.benchtime 2000x -test.cpu $cpu -test.count 1 >> netaccept-shards4.txt
  done
done
for procs in 2 8; do
  for s in 0 4 16; do
    for r in 1 2 3; do
      out=$(GOMAXPROCS=$procs GODEBUG=netpollshards=$s,netpollstats=1 ./check child accept -n 2000 2>&1)
      echo "gomaxprocs=$procs shards=$s $out" | tr '\n' ' ' >> herd.txt; echo >> herd.txt
    done
  done
done
echo done
