#!/usr/bin/env bash
# syscalls.sh: the server's syscalls per GiB served, by kind, for the
# file64M and proxy64M cells of run.sh (same pinning): perf stat on the
# server over 3 s in the middle of a 5 s wrk run, divided by the bytes wrk
# received in its run at the same rate. Indicative (one run per cell); the
# exact sendfile counts are asserted by the tests. Run it alone, from the
# repository root; prints a table.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
kinds="read write sendfile64 splice epoll_wait epoll_pwait futex"
ev=raw_syscalls:sys_enter
for k in $kinds; do ev="$ev,syscalls:sys_enter_$k"; done
printf "%-9s %-13s %8s" cell cfg MiB/s; for k in all $kinds; do printf " %10s" "$k"; done; echo "   (per GiB)"
start taskset -c 1 "$bin/httpserver" -impl net -files "$bin/files"
backend=$saddr
for what in file64M proxy64M; do
  for cfg in net net-copy netpoll netpoll-copy; do
    impl=${cfg%-copy}; zc=true; [ "$cfg" != "$impl" ] && zc=false
    if [ $what = file64M ]; then
      start taskset -c 0 "$bin/httpserver" -impl "$impl" -files "$bin/files" -zerocopy=$zc
    else
      start taskset -c 0 "$bin/tcpproxy" -impl "$impl" -to "$backend" -zerocopy=$zc
    fi
    pf=$(mktemp)
    (sleep 1; perf stat -x, -e "$ev" -p "$spid" -o "$pf" -- sleep 3) &
    res=$(taskset -c 1 wrk -t1 -c1 -d5s "http://$saddr/files/f64M")
    wait $!
    rate=$(sed -n 's/^Transfer\/sec: *\([0-9.]*\)\([KMG]B\)/\1 \2/p' <<<"$res" |
      awk '{ m = ($2 == "GB") ? 1024 : ($2 == "MB") ? 1 : 1 / 1024; print $1 * m }')
    printf "%-9s %-13s %8.0f" $what $cfg "$rate"
    for k in raw_syscalls:sys_enter $(for k in $kinds; do echo syscalls:sys_enter_$k; done); do
      n=$(awk -F, -v e="$k" '$3 == e { print $1 }' "$pf")
      awk -v n="${n:-0}" -v r="$rate" 'BEGIN { printf " %10.0f", n / (r * 3 / 1024) }'
    done
    echo
    rm -f "$pf"
    stop "$spid"
  done
done
