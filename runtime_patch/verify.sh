#!/usr/bin/env bash
# verify.sh [GOROOT] checks the edgepoll toolchain built by build.sh.
#
# For GODEBUG empty and for each setting (netpolloneshot=1, netpollspin=50,
# netpollspin=auto, netpollshards=4, netpollshortread=1, netpollzeroread=1)
# it runs, with GODEBUG set for the go command and the tests alike (both run
# on the patched runtime):
#   go vet runtime
#   go test -short net internal/poll os/signal net/http
#                  (under a netpollshortread setting also os and os/exec,
#                   whose tests read pipes and sockets in every way; under
#                   netpollzeroread also os)
#                  (under a netpollspin or netpollshards setting also sync
#                   and time, whose tests park and wake goroutines; under
#                   netpollspin=auto also internal/runtime/cgroup)
#   go test -short -run '<scheduler, netpoll and timer tests>' runtime
#                  (the $sched pattern below: TestNetpoll*, TestPreempt*,
#                   TestGoroutineParallelism, TestTimerFairness, ...)
# netpollzeroread=1 combined with netpollshortread=1 and with
# netpolloneshot=1 runs go test -short net internal/poll only;
# netpollzeroread=1,httpidlezeroread=1 (007: net/http's idle keep-alive
# connections wait without buffers, which needs both) runs go test -short
# net/http only.
# Under a netpollshards setting it also runs the net and net/http tests
# with 300 fds already open, so that their own fds are in shards other
# than the root (shard 0 holds fds 0 to 255).
# Then, for the recommended set together (netpollspin=auto,
# netpollshortread=1,netpollzeroread=1,httpidlezeroread=1, issue 37's
# profile): the full suites, not -short, of net (less the tests that
# need the Internet or privileges, $offline below), internal/poll,
# net/http, os, sync and time; go test -short runtime (all of it); and
# go test -race -short of net, internal/poll, sync and time.
# It then proves each setting is active with runtime_patch/check, built
# with the patched toolchain (see check/main.go): one EPOLL_CTL_MOD per park
# under strace for netpolloneshot, goroutines found by the spinning P for
# netpollspin (a ping-pong and its echo peer pinned to CPUs 0 and 1 with
# taskset), the same for netpollspin=auto and, in an idle window after the
# traffic, no more spin sessions than the adaptive policy's bound; no M
# blocked in netpoll while one spins (four ping-pongs at GOMAXPROCS=4); for
# netpollspin=auto's quota gate, spins refused by the runtime when the
# ping-pong runs in a cgroup with a quota of 0.5 CPU, and none refused
# without it (it makes the cgroup, v1 or v2, and removes it; skipped with
# the reason when it cannot make one, unless CI is set); n
# eventpoll fds and Ms waiting on single shards for netpollshards, and no M
# left in epoll_wait on a shard once its last fd is closed, and for
# netpollshortread reads failing with EAGAIN down to a tenth of the stock
# count in a ping-pong whose reads are all short (under strace), and no
# skip where it would wait for an edge that does not come (SO_RCVLOWAT set
# through a RawConn, Dialer.Control, ListenConfig.Control or on a socket
# net meets through FileConn; the urgent mark after recv(MSG_OOB) through
# RawRead; MPTCP), each Read against a watchdog, and no skip taken while
# a run queue holds goroutines (GOMAXPROCS=1, a stream read while
# goroutines keep the run queue busy); and for
# netpollzeroread a zero-byte Read that waits for a later write, returns at
# once for queued data with no new edge, ends with a deadline and with
# Close, and leaves a reset for the next Read (stock: returns at once); and
# for httpidlezeroread, an unmodified http.Server whose 200 idle keep-alive
# connections (TCP, then unix) all wait in net/http's zero-byte Read,
# counted by runtime/metrics, with at least 6 KiB less live heap per
# connection than with neither setting or httpidlezeroread=1 alone, where
# all wait in Peek and nothing is counted. It runs every step, prints a
# summary, and exits 1 if any step failed.
#
# Environment read:
#   EDGEPOLL_GOROOT        default GOROOT when no argument is given
#                          (default: $HOME/.cache/edgepoll/go1.26.8-edgepoll)
#   HOME                   only to form the default GOROOT above
#   EDGEPOLL_VERIFY_CACHE  GOCACHE for the tests (default: .verify-gocache
#                          next to GOROOT), kept between runs
#   EDGEPOLL_RECOMMENDED   the GODEBUG value of the recommended set's deep
#                          step (default netpollspin=auto,netpollshortread=1,
#                          netpollzeroread=1,httpidlezeroread=1); "-" skips
#                          that step
#   EDGEPOLL_SETTINGS      space-separated GODEBUG values to test instead of
#                          the ten above; write "-" for GODEBUG empty
#   TMPDIR                 where the temporary HOME and check binary go
#   PATH                   to find strace, taskset and the C toolchain
#   CI                     when set, check spinquota fails instead of
#                          skipping where it cannot make a cgroup
# Every other GO* variable is cleared; GOFLAGS is empty, GOTOOLCHAIN=local,
# HOME is a temporary directory, and GOPROXY=off (nothing is downloaded).
set -uo pipefail

readonly version=go1.26.8-edgepoll
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
goroot=${1:-${EDGEPOLL_GOROOT:-$HOME/.cache/edgepoll/$version}}
goroot=$(cd "$goroot" 2>/dev/null && pwd) || { echo "verify.sh: no GOROOT at ${1:-${EDGEPOLL_GOROOT:-$HOME/.cache/edgepoll/$version}}; run build.sh first" >&2; exit 1; }
cache=${EDGEPOLL_VERIFY_CACHE:-$(dirname "$goroot")/.verify-gocache}
# The recommended set: issue 37's profile (netpollshortread=1,netpollzeroread=1,
# httpidlezeroread=1, netpollbench's rt-profile) with netpollspin=auto added,
# so that the full suites run with every setting a server would combine.
recommended=${EDGEPOLL_RECOMMENDED:-netpollspin=auto,netpollshortread=1,netpollzeroread=1,httpidlezeroread=1}
# The full net suite's tests that need what a build machine may lack and
# that do not exercise the netpoller: the Internet's DNS (the Lookup
# tests, which back off for 36 s each without it), an unroutable address
# that no proxy answers (TestDialCancel) and the right to add dummy
# interfaces (TestInterfaceArrivalAndDeparture*). The -short runs above
# still run the ones that need none of it.
offline='^Test(CgoLookup|Lookup|DialCancel|InterfaceArrivalAndDeparture|ConcurrentPreferGoResolversDial|ResolverLookupIP)'
# The runtime's tests of the scheduler, the netpoller and timers, for each
# setting alone: the parts of the runtime the settings change.
sched='Netpoll|Sched|Preempt|GoroutineParallelism|BlockLocked|TimerFairness|GCFairness|NumGoroutine|PingPongHog|StealOrder|LockOSThread|Yield|StopTheWorld|Timer|Sleep|Spinning|Wakeup'
read -r -a settings <<<"${EDGEPOLL_SETTINGS:-- netpolloneshot=1 netpollspin=50 netpollspin=auto netpollshards=4 netpollshortread=1 netpollzeroread=1 netpollzeroread=1,netpollshortread=1 netpollzeroread=1,netpolloneshot=1 netpollzeroread=1,httpidlezeroread=1}"

for v in $(compgen -e); do
	[[ $v == GO* || $v == CGO_* ]] && unset "$v"
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/home" "$cache"
export HOME=$tmp/home GOROOT=$goroot GOCACHE=$cache GOPATH=$tmp/gopath
export GOFLAGS= GOENV=off GOTOOLCHAIN=local GOPROXY=off PATH=$goroot/bin:$PATH

got=$(go env GOVERSION)
if [[ $got != "$version" ]]; then
	echo "verify.sh: $goroot/bin/go is $got, want $version" >&2
	exit 1
fi

failed=()
passed=()
step() { # step NAME CMD...: run and record
	local name=$1
	shift
	echo "=== $name: $*"
	if "$@"; then
		passed+=("$name")
	else
		echo "--- FAIL: $name"
		failed+=("$name")
	fi
}

# past N CMD...: run CMD in the source directory of package N's tests
# with 300 more fds open (on /dev/null), so that the fds CMD opens are
# past the first block of 256 fd numbers: under netpollshards they land in
# shards other than the root, which a test process otherwise never reaches.
past() {
	local dir=$goroot/src/$1 i fd
	shift
	(
		cd "$dir" || exit 1
		for ((i = 0; i < 300; i++)); do exec {fd}</dev/null || exit 1; done
		exec "$@"
	)
}

for s in "${settings[@]}"; do
	[[ $s == - ]] && s=
	label=${s:-default}
	export GODEBUG=$s
	if [[ $s == netpollzeroread=1,httpidlezeroread=1 ]]; then
		# 007's setting, which acts only with netpollzeroread: the
		# package it changes (its own tests, server_idlezeroread_test.go,
		# run in this process then, without a child).
		step "$label: go test net/http" go test -short -count=1 net/http
		continue
	fi
	if [[ $s == netpollzeroread=1,* ]]; then
		# netpollzeroread combined with another setting: the packages
		# whose Reads it changes.
		step "$label: go test net internal/poll" go test -short -count=1 net internal/poll
		continue
	fi
	step "$label: go vet runtime" go vet runtime
	pkgs=(net internal/poll os/signal net/http)
	if [[ $s == *netpollshortread* ]]; then
		pkgs=(net internal/poll os os/exec os/signal net/http)
	fi
	if [[ $s == *netpollzeroread* ]]; then
		pkgs=(net internal/poll os os/signal net/http)
	fi
	if [[ $s == *netpollspin* || $s == *netpollshards* ]]; then
		# Scheduler changes: the sync and time suites park and wake
		# goroutines every way.
		pkgs+=(sync time)
	fi
	if [[ $s == *netpollspin=auto* ]]; then
		pkgs+=(internal/runtime/cgroup) # 005's cpu.stat and cpu.max parsers
	fi
	step "$label: go test ${pkgs[*]}" go test -short -count=1 "${pkgs[@]}"
	step "$label: go test -run '$sched' runtime" go test -short -count=1 -run "$sched" runtime
	if [[ $s == *netpollshards* ]]; then
		for p in net net/http; do
			t=$tmp/${p//\//_}.test
			[[ -x $t ]] || go test -c -o "$t" "$p" || { failed+=("build $p test"); continue; }
			step "$label: $p tests with their fds past 300" past "$p" "$t" -test.short -test.count=1
		done
	fi
done
# The recommended set, all together, as deep as the changes go: the full
# suites (not -short) of the packages the settings touch, the whole
# runtime suite (-short: its scheduler, netpoll, timer and GC tests), and
# the race detector on net, internal/poll, sync and time.
if [[ $recommended != - ]]; then
	export GODEBUG=$recommended
	step "$recommended: go test (full) net" go test -count=1 -skip "$offline" net
	step "$recommended: go test (full) internal/poll net/http os sync time" go test -count=1 internal/poll net/http os sync time
	step "$recommended: go test -short runtime" go test -short -count=1 runtime
	step "$recommended: go test -race -short net internal/poll sync time" go test -race -short -count=1 net internal/poll sync time
fi
unset GODEBUG

if ! command -v strace >/dev/null && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
	echo "=== installing strace for the oneshot and shortread checks"
	apt-get install -y -qq strace >/dev/null || true
fi
if ! command -v taskset >/dev/null && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
	echo "=== installing util-linux (taskset) for the spin checks"
	apt-get install -y -qq util-linux >/dev/null || true
fi
# The check uses only the standard library: build it as a module of its own,
# so that nothing of the repository's module graph (nor a download) is needed.
mkdir -p "$tmp/checksrc"
cp "$here"/check/*.go "$tmp/checksrc/"
printf 'module edgepollcheck\n\ngo 1.26\n' >"$tmp/checksrc/go.mod"
step "build check" go build -C "$tmp/checksrc" -o "$tmp/check" .
if [[ -x $tmp/check ]]; then
	step "check oneshot" "$tmp/check" oneshot
	step "check spin" "$tmp/check" spin
	step "check spinauto" "$tmp/check" spinauto
	step "check spinquota" "$tmp/check" spinquota
	step "check spinpoller" "$tmp/check" spinpoller
	step "check shards" "$tmp/check" shards
	step "check shardlast" "$tmp/check" shardlast
	step "check shortread" "$tmp/check" shortread
	step "check shortsafe" "$tmp/check" shortsafe
	step "check shortload" "$tmp/check" shortload
	step "check zeroread" "$tmp/check" zeroread
	step "check httpidle" "$tmp/check" httpidle
fi

echo
echo "verify.sh: ${#passed[@]} passed, ${#failed[@]} failed in $((SECONDS / 60)) min $((SECONDS % 60)) s"
for f in "${failed[@]}"; do
	echo "  FAIL $f"
done
((${#failed[@]} == 0))
