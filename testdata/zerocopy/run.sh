#!/usr/bin/env bash
# run.sh OUTDIR [ROUNDS] [SECONDS]: zero copy (issue 14), net against
# netpoll, each with -zerocopy on and off (off: the connections have no
# ReadFrom or WriteTo, so io.Copy and net/http copy through user space, as
# netpoll did before them). Three cells:
#   file1M, file64M  cmd/httpserver -files: GET of a 1 MiB and a 64 MiB file
#                    (http.FileServer), keep-alive, one connection
#   proxy64M         cmd/tcpproxy in front of a package net httpserver -files:
#                    GET of the 64 MiB file through the proxy
# The server under test (httpserver, or tcpproxy) is pinned to CPU 0
# (GOMAXPROCS=1); wrk and the proxy's backend to CPU 1. A fresh server per
# configuration and round, a warm-up GET series first, configurations
# interleaved round by round. Server CPU is utime+stime from /proc/PID/stat
# over the measured window. Writes OUTDIR/raw.txt (Go benchmark lines,
# labels what= and cfg=, units MiB/s and server-cpu-ms/GiB) with the
# machine's calibration (../shared/tools/calib) before and after.
# Run it alone on the machine, from the repository root.
set -euo pipefail
out=${1:?usage: run.sh OUTDIR [ROUNDS] [SECONDS]}; rounds=${2:-6}; secs=${3:-3}
configs=${CONFIGS:-"net net-copy netpoll netpoll-copy"}
shared=$(cd "$(dirname "$0")/../../../shared" && pwd)
mkdir -p "$out"
. "$(dirname "$0")/lib.sh"
raw=$out/raw.txt
{ "$shared/tools/calib" | sed 's/^/calib-before-/'; echo "pinning: server CPU 0, wrk and backend CPU 1"; } >"$raw"

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# measure WHAT CFG URL SIZE: one wrk run against spid; appends a line.
measure() {
  local what=$1 cfg=$2 url=$3 size=$4 t0 t1 res reqs wsecs
  taskset -c 1 wrk -t1 -c1 -d1s "$url" >/dev/null # warm-up
  t0=$(ticks "$spid")
  res=$(taskset -c 1 wrk -t1 -c1 -d"${secs}s" "$url")
  t1=$(ticks "$spid")
  reqs=$(sed -n 's/^ *\([0-9]*\) requests in \([0-9.]*\)\(m\?s\).*/\1/p' <<<"$res")
  wsecs=$(sed -n 's/^ *[0-9]* requests in \([0-9.]*\)\(m\?s\).*/\1 \2/p' <<<"$res" |
    awk '{print ($2 == "ms") ? $1 / 1000 : $1}')
  if [ -z "$reqs" ] || [ "$reqs" -eq 0 ] || grep -q "Non-2xx\|Socket errors" <<<"$res"; then
    echo "round $r $what $cfg: FAILED: $res" >&2
    return
  fi
  awk -v n="$reqs" -v s="$wsecs" -v sz="$size" -v c="$((t1 - t0))" -v hz="$(getconf CLK_TCK)" \
    -v name="BenchmarkZeroCopy/what=$what/cfg=$cfg" 'BEGIN {
      mib = n * sz / 1048576
      printf "%s\t%d\t%.1f MiB/s\t%.1f server-cpu-ms/GiB\n", name, n, mib / s, (c / hz * 1000) / (mib / 1024)
    }' >>"$raw"
}

start taskset -c 1 "$bin/httpserver" -impl net -files "$bin/files"
backend=$saddr
for r in $(seq "$rounds"); do
  for cfg in $configs; do
    impl=${cfg%-copy}
    zc=true; [ "$cfg" != "$impl" ] && zc=false
    start taskset -c 0 "$bin/httpserver" -impl "$impl" -files "$bin/files" -zerocopy="$zc"
    measure file1M "$cfg" "http://$saddr/files/f1M" $((1 << 20))
    measure file64M "$cfg" "http://$saddr/files/f64M" $((64 << 20))
    stop "$spid"
    start taskset -c 0 "$bin/tcpproxy" -impl "$impl" -to "$backend" -zerocopy="$zc"
    measure proxy64M "$cfg" "http://$saddr/files/f64M" $((64 << 20))
    stop "$spid"
  done
  echo "round $r done" >&2
done
"$shared/tools/calib" | sed 's/^/calib-after-/' >>"$raw"
