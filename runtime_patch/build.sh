#!/usr/bin/env bash
# build.sh [DEST] builds the edgepoll Go toolchain: go1.26.8 with the
# patches in runtime_patch/patches applied, installed as a GOROOT at DEST.
#
# Steps: fetch golang.org/toolchain@v0.0.1-go1.26.8.linux-amd64 from the Go
# module proxy and refuse it unless its checksum is the pinned one; copy it
# (the module cache copy is read-only, its scripts lack exec bits and its
# nested go.mod files are stored as _go.mod: all three are undone); apply
# every patch with zero fuzz; set GOTOOLCHAIN=local in go.env (the module
# says auto, and a go line in some go.mod could then switch to an unpatched
# toolchain); write VERSION as go1.26.8-edgepoll, so objects built by a stock
# toolchain cannot be linked with ours; run src/make.bash with an isolated
# HOME, GOCACHE and GOPATH and no inherited GO* settings.
#
# A second run reuses DEST when its stamp (sha256 of the base checksum, every
# patch and this script) is unchanged; otherwise it rebuilds into a staging
# directory next to DEST and swaps it in only when the build succeeded.
#
# Environment read:
#   EDGEPOLL_GOROOT    default DEST when no argument is given
#                      (default: $HOME/.cache/edgepoll/go1.26.8-edgepoll)
#   HOME               only to form the default DEST above
#   GO                 the go command used to download the base toolchain
#                      (default: go on PATH); its GOPROXY, GOMODCACHE,
#                      GONOSUMDB/GOSUMDB and other module settings apply to
#                      the download
#   GOROOT_BOOTSTRAP   the Go used to run make.bash (default: a second copy
#                      of the same pinned module, whose stock go1.26.8
#                      binaries build the patched tree; so the build needs
#                      no particular Go installed, only a go command recent
#                      enough to download modules)
#   EDGEPOLL_REBUILD   set to 1 to rebuild even when the stamp matches
#   PATH               to find go, patch, sha256sum and the C toolchain
# Every other GO* variable (GOFLAGS, GOOS, GOARCH, GOEXPERIMENT, GODEBUG,
# GOCACHE, GOPATH, GOROOT, GOTOOLCHAIN, ...) is cleared for make.bash.
set -euo pipefail

readonly base_module=golang.org/toolchain
readonly base_version=v0.0.1-go1.26.8.linux-amd64
readonly base_sum='h1:ZOmGe1OnfREDMIdb1Qi4G9JSuDPBLGExZMQ4nis1RXM='
readonly version=go1.26.8-edgepoll

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dest=${1:-${EDGEPOLL_GOROOT:-$HOME/.cache/edgepoll/$version}}
go=${GO:-go}

log() { printf 'build.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

command -v "$go" >/dev/null || die "no go command ($go) to download the base toolchain"
command -v patch >/dev/null || die "patch is not installed"
command -v sha256sum >/dev/null || die "sha256sum is not installed"

shopt -s nullglob
patches=("$here"/patches/[0-9][0-9][0-9]-*.patch)
shopt -u nullglob
((${#patches[@]} > 0)) || die "no patches in $here/patches"

# The stamp names exactly what DEST was built from.
stamp=$({
	echo "$base_module@$base_version $base_sum"
	for p in "${patches[@]}"; do
		echo "== $(basename "$p")"
		cat "$p"
	done
	echo "== build.sh"
	cat "$here/build.sh"
} | sha256sum | cut -d' ' -f1)

if [[ ${EDGEPOLL_REBUILD:-} != 1 && -f $dest/.edgepoll-stamp &&
	$(cat "$dest/.edgepoll-stamp") == "$stamp" && -x $dest/bin/go ]] &&
	[[ $("$dest/bin/go" env GOVERSION 2>/dev/null) == "$version" ]]; then
	log "reusing $dest (stamp $stamp)"
	echo "$dest"
	exit 0
fi

# Fetch and check the pristine toolchain.
log "downloading $base_module@$base_version"
json=$(GOFLAGS= GO111MODULE=on "$go" mod download -json "$base_module@$base_version")
field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}$/\1/p" <<<"$json"; }
src=$(field Dir)
sum=$(field Sum)
[[ -n $src && -d $src ]] || die "go mod download printed no Dir:
$json"
[[ $sum == "$base_sum" ]] || die "checksum mismatch for $base_module@$base_version: got $sum, pinned $base_sum"
[[ $(head -n1 "$src/VERSION") == go1.26.8 ]] || die "$src/VERSION is not go1.26.8"

parent=$(dirname "$dest")
mkdir -p "$parent"
stage=$(mktemp -d "$parent/.$(basename "$dest").stage.XXXXXX")
work=$(mktemp -d "$parent/.$(basename "$dest").work.XXXXXX")
chmod 755 "$stage"
cleanup() { chmod -R u+w "$stage" "$work" 2>/dev/null || true; rm -rf "$stage" "$work"; }
trap cleanup EXIT

# unpack DIR: copy the module to DIR and undo what the module format did.
unpack() {
	local dir=$1 f d first
	log "copying $src to $dir"
	cp -R "$src/." "$dir/"
	chmod -R u+w "$dir"
	# Nested modules are stored as _go.mod in the module zip.
	while IFS= read -r -d '' f; do
		d=$(dirname "$f")
		[[ -e $d/go.mod ]] || mv "$f" "$d/go.mod"
	done < <(find "$dir" -name _go.mod -print0)
	# Scripts and binaries lost their exec bits.
	while IFS= read -r -d '' f; do
		first=
		IFS= read -r -n2 first <"$f" 2>/dev/null || true
		if [[ $first == '#!' ]]; then chmod +x "$f"; fi
	done < <(find "$dir/src" "$dir/lib" -type f -print0)
	chmod +x "$dir"/bin/* "$dir"/pkg/tool/*/*
	sed -i 's/^GOTOOLCHAIN=.*/GOTOOLCHAIN=local/' "$dir/go.env"
	grep -qx 'GOTOOLCHAIN=local' "$dir/go.env" || die "could not set GOTOOLCHAIN=local in $dir/go.env"
}

bootstrap=${GOROOT_BOOTSTRAP:-}
if [[ -z $bootstrap ]]; then
	bootstrap=$work/bootstrap
	mkdir -p "$bootstrap"
	unpack "$bootstrap"
fi
[[ -x $bootstrap/bin/go ]] || die "GOROOT_BOOTSTRAP=$bootstrap has no bin/go"

unpack "$stage"
# make.bash rebuilds the binaries; none of the stock ones may survive into
# the patched GOROOT.
rm -rf "$stage/bin" "$stage/pkg/tool"

for p in "${patches[@]}"; do
	log "applying $(basename "$p")"
	patch -d "$stage" -p1 --fuzz=0 --batch --forward --no-backup-if-mismatch --quiet <"$p" ||
		die "$(basename "$p") does not apply with zero fuzz"
done
if find "$stage" \( -name '*.rej' -o -name '*.orig' \) | grep -q .; then
	die "patching left .rej or .orig files"
fi

{
	echo "$version"
	sed -n '2,$p' "$src/VERSION"
} >"$stage/VERSION"

log "make.bash with GOROOT_BOOTSTRAP=$bootstrap (takes minutes)"
mkdir -p "$work/home" "$work/gocache" "$work/gopath"
(
	for v in $(compgen -e); do
		[[ $v == GO* || $v == CGO_* ]] && unset "$v"
	done
	export HOME=$work/home GOCACHE=$work/gocache GOPATH=$work/gopath
	export GOFLAGS= GOENV=off GOTOOLCHAIN=local GOROOT_BOOTSTRAP=$bootstrap
	cd "$stage/src"
	bash ./make.bash
) >&2 || die "make.bash failed"

got=$("$stage/bin/go" env GOVERSION)
[[ $got == "$version" ]] || die "built toolchain says $got, want $version"
echo "$stamp" >"$stage/.edgepoll-stamp"

# Swap the new GOROOT in.
if [[ -e $dest ]]; then
	chmod -R u+w "$dest"
	rm -rf "$dest"
fi
mv "$stage" "$dest"
log "built $dest ($version)"
echo "$dest"
