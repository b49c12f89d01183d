#!/bin/bash
# Issue 35 (session 5): two default runs and one run pairing the default
# with hot reads (auto) against it with every read on the poller
# (auto-cold), each after quiet+calib.
set -u
cd "$(dirname "$0")/../../.."  # the repository
out=testdata/issue35/hotread
mkdir -p $out
for r in run1 run2; do
  ../shared/tools/quiet >/dev/null 2>&1
  echo "== calib before $r"; ../shared/tools/calib 2>&1 | tail -3
  go run ./cmd/netpollbench -out $out/$r > /tmp/hotread-$r.log 2>&1
  echo "== calib after $r"; ../shared/tools/calib 2>&1 | tail -3
  rm -rf $out/$r/bin
done
../shared/tools/quiet >/dev/null 2>&1
echo "== calib before pair"; ../shared/tools/calib 2>&1 | tail -3
go run ./cmd/netpollbench -configs net,auto,auto-cold,et,ondemand -runtime off -idle 0 -herd=false -quota 0 -http none -rounds 8 -out $out/pair > /tmp/hotread-pair.log 2>&1
echo "== calib after pair"; ../shared/tools/calib 2>&1 | tail -3
rm -rf $out/pair/bin
date
