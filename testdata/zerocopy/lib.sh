# lib.sh, sourced by run.sh and syscalls.sh: builds cmd/httpserver and
# cmd/tcpproxy into $bin with the test files in $bin/files (f1M, f64M), and
# defines start and stop. Killed servers and $bin go on exit.
bin=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$bin"; }
trap cleanup EXIT
go build -o "$bin" ./cmd/httpserver ./cmd/tcpproxy
mkdir "$bin/files"
head -c $((1 << 20)) /dev/urandom >"$bin/files/f1M"
head -c $((64 << 20)) /dev/urandom >"$bin/files/f64M"

# start BIN ARGS...: runs a server, waits for its address; sets spid, saddr.
start() {
  local so; so=$(mktemp)
  "$@" -addr 127.0.0.1:0 -lifetime 10m >"$so" 2>/dev/null &
  spid=$!
  pids+=("$spid")
  for _ in $(seq 200); do grep -q listening "$so" && break; sleep 0.05; done
  saddr=$(sed -n 's/^[a-z]* listening on \([^ ]*\) .*/\1/p' "$so")
  rm -f "$so"
  [ -n "$saddr" ] || { echo "server $* did not start" >&2; exit 1; }
}
stop() { kill -INT "$1"; wait "$1" 2>/dev/null || true; }
