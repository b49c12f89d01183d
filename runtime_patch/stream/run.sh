#!/usr/bin/env bash
# run.sh [ROUNDS] [OUT] measures netpollshortread under a saturated HTTP/2
# stream (BenchmarkH2Stream, stream_test.go) on the patched toolchain, the
# setting on and off in each round, in alternate order, and prints
# benchstat's table of the two. Run it alone on the machine, after
# runtime_patch/build.sh.
#
# Environment read:
#   EDGEPOLL_GOROOT   the patched toolchain
#                     (default: $HOME/.cache/edgepoll/go1.26.8-edgepoll)
#   HOME              only to form that default
#   BENCHTIME         -test.benchtime per measurement (default 20000x)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
goroot=${EDGEPOLL_GOROOT:-$HOME/.cache/edgepoll/go1.26.8-edgepoll}
rounds=${1:-8}
out=${2:-$root/testdata/issue36/stream}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && GOROOT=$goroot GOTOOLCHAIN=local GOFLAGS= "$goroot/bin/go" test -c -o "$tmp/stream.test" ./runtime_patch/stream)
"$goroot/bin/go" version > "$out/toolchain.txt"
: > "$out/bench.txt"
for r in $(seq "$rounds"); do
	if ((r % 2)); then order=(off on); else order=(on off); fi
	for s in "${order[@]}"; do
		g=
		[[ $s == on ]] && g=netpollshortread=1
		GODEBUG=$g "$tmp/stream.test" -test.run '^$' -test.bench H2Stream -test.benchtime "${BENCHTIME:-20000x}" -test.count 1 >> "$out/bench.txt"
	done
done
(cd "$root" && go tool benchstat -col /shortread "$out/bench.txt") | tee "$out/benchstat.txt"
