#!/bin/bash
# sc.sh name port echoserver-args...: syscalls per request of an echo server, 1 conn unpinned
name=$1; port=$2; shift 2
/tmp/bin/echoserver -addr 127.0.0.1:$port -lifetime 7s "$@" >/dev/null 2>&1 &
pid=$!
sleep 0.3
/tmp/bin/loadgen -addr 127.0.0.1:$port -conns 1 -size 64 -duration 5s -warmup 300ms -format bench -labels cfg=$name > /tmp/lg-$name.txt 2>&1 &
lg=$!
sleep 1
ev=raw_syscalls:sys_enter
for s in read write epoll_pwait epoll_ctl futex nanosleep sched_yield poll ppoll getpid tgkill; do ev="$ev,syscalls:sys_enter_$s"; done
ev="$ev,context-switches,cpu-migrations,task-clock"
perf stat -x, -e "$ev" -p $pid -- sleep 3 2>/tmp/ps-$name.txt >/dev/null
wait $lg
nsop=$(awk '{print $3}' /tmp/lg-$name.txt | head -1)
awk -F, -v ns=$nsop -v name=$name 'BEGIN{req=3e9/ns} $1 ~ /^[0-9.]+$/ && $1 != 0 { sub(/^syscalls:sys_enter_/, "", $3); printf "%s %-16s %8.3f /req\n", name, $3, $1/req }' /tmp/ps-$name.txt
echo "$name req/s $(awk -v ns=$nsop 'BEGIN{print 1e9/ns}')"
wait $pid
