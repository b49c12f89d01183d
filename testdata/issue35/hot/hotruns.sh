#!/bin/bash
# Issue 35 (session 4): two default runs and one before/after run, each after quiet+calib.
set -u
cd "$(dirname "$0")/../../.."  # the repository
out=testdata/issue35/hot
mkdir -p $out
for r in run1 run2; do
  ../shared/tools/quiet >/dev/null 2>&1
  echo "== calib before $r"; ../shared/tools/calib 2>&1 | tail -3
  go run ./cmd/netpollbench -out $out/$r > /tmp/hot-$r.log 2>&1
  echo "== calib after $r"; ../shared/tools/calib 2>&1 | tail -3
  rm -rf $out/$r/bin
done
../shared/tools/quiet >/dev/null 2>&1
echo "== calib before roles"; ../shared/tools/calib 2>&1 | tail -3
go run ./cmd/netpollbench -configs net,ondemand,ondemand-role,ondemand-go,gnet -runtime off -idle 0 -herd=false -quota 0 -http none -rounds 8 -out $out/roles > /tmp/hot-roles.log 2>&1
echo "== calib after roles"; ../shared/tools/calib 2>&1 | tail -3
rm -rf $out/roles/bin
date
