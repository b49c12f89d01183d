#!/bin/bash
# Issue 35 (session 6): two default runs, then one run pairing the Server
# with read-ahead (ondemand, the default) against it polling (ondemand-poll),
# in every cell but idle, herd and quota, each after quiet+calib.
set -u
cd "$(dirname "$0")/../../.."  # the repository
out=testdata/issue35/readahead
mkdir -p $out
for r in run1 run2; do
  ../shared/tools/quiet >/dev/null 2>&1
  echo "== calib before $r"; ../shared/tools/calib 2>&1 | tail -3
  go run ./cmd/netpollbench -out $out/$r > /tmp/readahead-$r.log 2>&1
  echo "== calib after $r"; ../shared/tools/calib 2>&1 | tail -3
  rm -rf $out/$r/bin
done
../shared/tools/quiet >/dev/null 2>&1
echo "== calib before pair"; ../shared/tools/calib 2>&1 | tail -3
go run ./cmd/netpollbench -configs net,auto,ondemand,ondemand-poll,gnet -runtime off -idle 0 -herd=false -quota 0 -http none -rounds 8 -out $out/pair > /tmp/readahead-pair.log 2>&1
echo "== calib after pair"; ../shared/tools/calib 2>&1 | tail -3
rm -rf $out/pair/bin
date
