#!/bin/bash
# Issue 35 (session 5), after the review's fixes: a third default run, the
# unpinned one-connection cell alone again (16 rounds), and the open-loop
# sweep alone with 12 rounds, each after quiet+calib.
set -u
cd "$(dirname "$0")/../../.."  # the repository
out=testdata/issue35/hotread
step() {
  local r=$1; shift
  ../shared/tools/quiet >/dev/null 2>&1
  echo "== calib before $r"; ../shared/tools/calib 2>&1 | tail -3
  go run ./cmd/netpollbench "$@" -out $out/$r > /tmp/hotread-$r.log 2>&1
  echo "== calib after $r"; ../shared/tools/calib 2>&1 | tail -3
  rm -rf $out/$r/bin
}
step run3
step unpinned16b -pin off -conns 1 -sweep=false -neighbour=false -http none -idle 0 -herd=false -quota 0 -runtime off -configs net,auto,auto-cold,ondemand -rounds 16
step sweep12 -conns 1 -unpinned=false -neighbour=false -http none -idle 0 -herd=false -quota 0 -runtime off -configs net,auto,ondemand -rounds 2 -sweep-rounds 12
date
