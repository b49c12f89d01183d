#!/bin/bash
# paired rounds: main and watch binaries in turn, BlockedNeighbour wait=inline rows and net
set -e
cd /work/main/bench
for r in 1 2 3 4 5 6; do
  for v in main watch; do
    /tmp/bench-$v.test -test.run '^$' -test.bench 'BlockedNeighbour/(impl=net|.*wait=inline)/' -test.benchtime 20000x -test.count 1 2>&1 | grep '^Benchmark' | sed "s/^Benchmark/round=$r v=$v Benchmark/"
  done
done
