#!/usr/bin/env bash
# check.sh [DIR] checks the upstream series in runtime_patch/upstream
# (NNNN-*.patch, git format-patch output) against pristine go1.26.8.
#
# Steps: fetch golang.org/toolchain@v0.0.1-go1.26.8.linux-amd64 with
# go mod download and refuse it unless its checksum is the pinned one; copy
# it to DIR/goroot (writable, nested _go.mod files renamed back to go.mod,
# exec bits of #! scripts and of the stock binaries restored, as build.sh
# does); add doc/godebug.md, which the module leaves out, from a go1.26.8
# distribution (pinned by sha256), because the series edits it; apply every
# patch with patch -p1 --fuzz=0. Then, with the stock go1.26.8 go command
# of that copy (GOROOT=DIR/goroot; the series changes no tool, so the stock
# compiler and linker build the patched standard library from source, and
# no make.bash is needed):
#   go build std                     for each platform in $std_platforms
#   go vet internal/poll internal/syscall/unix net
#                                    for linux/amd64 and each platform in
#                                    $std_platforms
#   go build internal/poll net and go vet internal/poll internal/syscall/unix
#                                    for each platform in $more_platforms
#                                    (openbsd/mips64 is left out: go1.26.8's
#                                    runtime does not build for it, stock or
#                                    patched, and dist list no longer has it)
#   go test -short net internal/poll internal/syscall/unix internal/godebug
#           internal/godebugs runtime/metrics
#                                    with GODEBUG empty (godebugs checks the
#                                    table against doc/godebug.md and the
#                                    IncNonDefault calls; runtime/metrics its
#                                    doc comment)
#   go test -run TestDependencies go/build
#                                    (internal/poll now imports internal/godebug)
#   go test -short net internal/poll os os/signal net/http
#                                    with GODEBUG=netpollzeroread=1
#   go test -run ZeroByte net        (without -short) with GODEBUG empty and
#                                    with GODEBUG=netpollzeroread=1
# It runs every step, prints a summary, and exits 1 if any step failed.
# DIR/goroot is made again on every run; DIR/gocache is kept.
#
# With EDGEPOLL_UPSTREAM_MAKE=1 it first runs src/make.bash in DIR/goroot
# (GOTOOLCHAIN=local in its go.env, as build.sh sets it), so that the
# checks run on the rebuilt toolchain and DIR/goroot can then serve as
# EDGEPOLL_GOROOT for cmd/netpollbench (3-7 minutes on 2 cores). VERSION
# stays go1.26.8.
#
# Environment read:
#   GO                   the go command used to download the base toolchain
#                        (default: go on PATH); its module settings (GOPROXY,
#                        GOMODCACHE, GOSUMDB, ...) apply to the download
#   EDGEPOLL_GODEBUG_MD  go1.26.8's doc/godebug.md (default: doc/godebug.md
#                        in the GOROOT of $GO, which a go1.26.8 distribution
#                        has); refused unless its sha256 is the pinned one
#   EDGEPOLL_UPSTREAM_STD_PLATFORMS, EDGEPOLL_UPSTREAM_MORE_PLATFORMS
#                        space-separated GOOS/GOARCH lists replacing the
#                        defaults below; "none" for an empty list
#   EDGEPOLL_UPSTREAM_MAKE  1 to run make.bash first (see above)
#   GOROOT_BOOTSTRAP     the Go that runs make.bash (default: the GOROOT of
#                        $GO)
#   TMPDIR               where DIR is made when none is given (it is then
#                        removed at the end)
#   PATH                 to find go, patch and sha256sum
# Every other GO* variable is cleared for the builds and tests; GOFLAGS is
# empty, GOTOOLCHAIN=local, GOPROXY=off, HOME is DIR/home.
set -uo pipefail

readonly base_module=golang.org/toolchain
readonly base_version=v0.0.1-go1.26.8.linux-amd64
readonly base_sum='h1:ZOmGe1OnfREDMIdb1Qi4G9JSuDPBLGExZMQ4nis1RXM='
readonly godebug_md_sum=c1e6c227a93f6d8427a69141261cf7f703c083552cce52e3135549ba537a11e5

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
go=${GO:-go}
std_platforms=${EDGEPOLL_UPSTREAM_STD_PLATFORMS:-darwin/arm64 darwin/amd64 freebsd/amd64 illumos/amd64}
more_platforms=${EDGEPOLL_UPSTREAM_MORE_PLATFORMS:-openbsd/amd64 openbsd/arm64 netbsd/amd64 dragonfly/amd64 solaris/amd64 aix/ppc64 linux/arm64 linux/386 wasip1/wasm js/wasm windows/amd64}
[[ $std_platforms == none ]] && std_platforms=
[[ $more_platforms == none ]] && more_platforms=

log() { printf 'check.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

command -v "$go" >/dev/null || die "no go command ($go) to download the base toolchain"
command -v patch >/dev/null || die "patch is not installed"
command -v sha256sum >/dev/null || die "sha256sum is not installed"

shopt -s nullglob
patches=("$here"/[0-9][0-9][0-9][0-9]-*.patch)
shopt -u nullglob
((${#patches[@]} > 0)) || die "no patches in $here"

if [[ $# -gt 0 ]]; then
	dir=$1
	mkdir -p "$dir" || die "cannot make $dir"
else
	dir=$(mktemp -d "${TMPDIR:-/tmp}/edgepoll-upstream.XXXXXX") || die "cannot make a temporary directory"
	trap 'chmod -R u+w "$dir" 2>/dev/null; rm -rf "$dir"' EXIT
fi
dir=$(cd "$dir" && pwd)
goroot=$dir/goroot

godebug_md=${EDGEPOLL_GODEBUG_MD:-$("$go" env GOROOT)/doc/godebug.md}
[[ -f $godebug_md ]] || die "no $godebug_md: set EDGEPOLL_GODEBUG_MD to go1.26.8's doc/godebug.md"
[[ $(sha256sum <"$godebug_md" | cut -d' ' -f1) == "$godebug_md_sum" ]] ||
	die "$godebug_md is not go1.26.8's doc/godebug.md (sha256 differs)"

log "downloading $base_module@$base_version"
json=$(GOFLAGS= GO111MODULE=on "$go" mod download -json "$base_module@$base_version")
field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}$/\1/p" <<<"$json"; }
src=$(field Dir)
sum=$(field Sum)
[[ -n $src && -d $src ]] || die "go mod download printed no Dir:
$json"
[[ $sum == "$base_sum" ]] || die "checksum mismatch for $base_module@$base_version: got $sum, pinned $base_sum"

log "copying $src to $goroot"
if [[ -e $goroot ]]; then
	chmod -R u+w "$goroot"
	rm -rf "$goroot"
fi
mkdir -p "$goroot" "$dir/home" "$dir/gocache"
cp -R "$src/." "$goroot/"
chmod -R u+w "$goroot"
while IFS= read -r -d '' f; do
	d=$(dirname "$f")
	[[ -e $d/go.mod ]] || mv "$f" "$d/go.mod"
done < <(find "$goroot" -name _go.mod -print0)
while IFS= read -r -d '' f; do
	first=
	IFS= read -r -n2 first <"$f" 2>/dev/null || true
	if [[ $first == '#!' ]]; then chmod +x "$f"; fi
done < <(find "$goroot/src" "$goroot/lib" -type f -print0)
chmod +x "$goroot"/bin/* "$goroot"/pkg/tool/*/*
mkdir -p "$goroot/doc"
cp "$godebug_md" "$goroot/doc/godebug.md"

for p in "${patches[@]}"; do
	log "applying $(basename "$p")"
	patch -d "$goroot" -p1 --fuzz=0 --batch --forward --no-backup-if-mismatch --quiet <"$p" ||
		die "$(basename "$p") does not apply with zero fuzz"
done
if find "$goroot" \( -name '*.rej' -o -name '*.orig' \) | grep -q .; then
	die "patching left .rej or .orig files"
fi

bootstrap=${GOROOT_BOOTSTRAP:-$("$go" env GOROOT)}
for v in $(compgen -e); do
	[[ $v == GO* || $v == CGO_* ]] && unset "$v"
done
if [[ ${EDGEPOLL_UPSTREAM_MAKE:-} == 1 ]]; then
	[[ -x $bootstrap/bin/go ]] || die "GOROOT_BOOTSTRAP=$bootstrap has no bin/go"
	sed -i 's/^GOTOOLCHAIN=.*/GOTOOLCHAIN=local/' "$goroot/go.env"
	rm -rf "$goroot/bin" "$goroot/pkg/tool"
	log "make.bash with GOROOT_BOOTSTRAP=$bootstrap (takes minutes)"
	(
		export HOME=$dir/home GOCACHE=$dir/gocache GOPATH=$dir/gopath
		export GOFLAGS= GOENV=off GOTOOLCHAIN=local GOROOT_BOOTSTRAP=$bootstrap
		cd "$goroot/src" && bash ./make.bash
	) >&2 || die "make.bash failed"
fi
export HOME=$dir/home GOROOT=$goroot GOCACHE=$dir/gocache GOPATH=$dir/gopath
export GOFLAGS= GOENV=off GOTOOLCHAIN=local GOPROXY=off PATH=$goroot/bin:$PATH
[[ $(go env GOVERSION) == go1.26.8 ]] || die "$goroot/bin/go is not go1.26.8"

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
on() { # on GOOS/GOARCH CMD...: run CMD for that platform
	local p=$1
	shift
	GOOS=${p%/*} GOARCH=${p#*/} "$@"
}

step "linux/amd64: go build std" go build std
step "linux/amd64: go vet" go vet internal/poll internal/syscall/unix net
for p in $std_platforms; do
	step "$p: go build std" on "$p" go build std
	step "$p: go vet" on "$p" go vet internal/poll internal/syscall/unix net
done
for p in $more_platforms; do
	step "$p: go build" on "$p" go build internal/poll net
	step "$p: go vet" on "$p" go vet internal/poll internal/syscall/unix
done

step "GODEBUG empty: go test -short" go test -short -count=1 net internal/poll internal/syscall/unix internal/godebug internal/godebugs runtime/metrics
step "go test -run TestDependencies go/build" go test -count=1 -run TestDependencies go/build
step "GODEBUG=netpollzeroread=1: go test -short" env GODEBUG=netpollzeroread=1 go test -short -count=1 net internal/poll os os/signal net/http
step "GODEBUG empty: go test -run ZeroByte net" go test -count=1 -v -run ZeroByte net
step "GODEBUG=netpollzeroread=1: go test -run ZeroByte net" env GODEBUG=netpollzeroread=1 go test -count=1 -v -run ZeroByte net

echo
echo "check.sh: ${#passed[@]} passed, ${#failed[@]} failed"
for f in "${failed[@]}"; do
	echo "  FAIL $f"
done
((${#failed[@]} == 0))
