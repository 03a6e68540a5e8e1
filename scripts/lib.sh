# Shared set-up for the scripts in this directory; source it, do not run it.
# It makes a Go toolchain available (installing one from the Go module proxy
# when the machine has none, or one older than 1.21), and installs Debian
# packages that are missing.

set -euo pipefail

DLOCK_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DLOCK_GO_VERSION=1.26.8 # the toolchain fetched when the machine has no usable Go

log() { printf '==> %s\n' "$*" >&2; }

# as_root runs a command as root: directly when we are root, else with sudo.
as_root() {
	if [ "$(id -u)" = 0 ]; then
		"$@"
	elif command -v sudo >/dev/null; then
		sudo "$@"
	else
		log "need root to run: $* (install sudo or run as root)"
		return 1
	fi
}

# ensure_pkgs installs the Debian packages among "$@" that are not installed.
ensure_pkgs() {
	local missing=()
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	log "installing Debian packages: ${missing[*]}"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# go_ok says whether "go" on PATH is 1.21 or newer (those fetch the
# toolchain that go.mod asks for by themselves, through GOTOOLCHAIN=auto).
go_ok() {
	command -v go >/dev/null || return 1
	local v
	v=$(go env GOVERSION 2>/dev/null | sed 's/^go//') || return 1
	[ "$(printf '%s\n%s\n' "1.21" "$v" | sort -V | head -1)" = "1.21" ]
}

ensure_go() {
	for d in /usr/local/go/bin "$HOME/go/bin" "${XDG_CACHE_HOME:-$HOME/.cache}/dlock/go/bin"; do
		[ -d "$d" ] && case ":$PATH:" in *":$d:"*) ;; *) PATH="$d:$PATH" ;; esac
	done
	export PATH
	go_ok && return 0
	local arch
	case "$(uname -m)" in
	x86_64) arch=amd64 ;;
	aarch64 | arm64) arch=arm64 ;;
	*) log "no Go toolchain for $(uname -m); install Go 1.21 or newer"; return 1 ;;
	esac
	ensure_pkgs ca-certificates curl unzip
	local dest="${XDG_CACHE_HOME:-$HOME/.cache}/dlock"
	local proxy="${GOPROXY:-https://proxy.golang.org}"
	proxy=${proxy%%,*}
	[ "$proxy" = direct ] || [ "$proxy" = off ] && proxy=https://proxy.golang.org
	local url="$proxy/golang.org/toolchain/@v/v0.0.1-go$DLOCK_GO_VERSION.linux-$arch.zip"
	log "installing Go $DLOCK_GO_VERSION into $dest/go (from $url)"
	mkdir -p "$dest"
	curl -fsSL -o "$dest/go.zip" "$url"
	rm -rf "$dest/golang.org" "$dest/go"
	unzip -q "$dest/go.zip" -d "$dest"
	mv "$dest"/golang.org/toolchain@*/ "$dest/go"
	rm -rf "$dest/golang.org" "$dest/go.zip"
	chmod +x "$dest/go/bin/"* "$dest/go/pkg/tool/"*/* 2>/dev/null || true
	PATH="$dest/go/bin:$PATH"
	export PATH
	go_ok || { log "Go install failed"; return 1; }
}

# module_sandbox sets up the environment of a user who fetches dlock's
# modules from GitHub, with this repository's committed HEAD standing in for
# GitHub: the go command clones github.com/dlock-dev/dlock from a bare
# clone of HEAD's branch (git's url.insteadOf), without the proxy or the
# checksum database for it (GOPRIVATE), outside the workspace (GOWORK=off).
# The module cache is the usual one (a version there is what GitHub would
# serve for that commit), unless DLOCK_SANDBOX_MODCACHE=1 asks for one of
# its own, as on a fresh machine (slower: every dependency is unpacked
# again; other modules then come from the usual cache as a proxy). It sets
# SANDBOX to a temporary directory that is removed on exit.
module_sandbox() {
	local proxy modcache
	proxy=$(go env GOPROXY)
	modcache=$(go env GOMODCACHE)
	SANDBOX=$(mktemp -d)
	trap 'chmod -R u+w "$SANDBOX" 2>/dev/null; rm -rf "$SANDBOX"' EXIT
	if [ -n "$(git -C "$DLOCK_ROOT" status --porcelain --untracked-files=no)" ]; then
		log "note: uncommitted changes are not part of the check (it uses HEAD)"
	fi
	git clone -q --bare --single-branch "$DLOCK_ROOT" "$SANDBOX/dlock.git"
	printf '[url "file://%s/dlock.git"]\n\tinsteadOf = https://github.com/dlock-dev/dlock\n' "$SANDBOX" >"$SANDBOX/gitconfig"
	export GIT_CONFIG_GLOBAL="$SANDBOX/gitconfig" GIT_CONFIG_NOSYSTEM=1
	export GOWORK=off GOPRIVATE=github.com/dlock-dev/dlock
	if [ "${DLOCK_SANDBOX_MODCACHE:-}" = 1 ]; then
		export GOMODCACHE="$SANDBOX/mod" GOPROXY="file://$modcache/cache/download,$proxy"
		export GOFLAGS="${GOFLAGS:+$GOFLAGS }-modcacherw"
	fi
}

# pseudo_version prints the Go pseudo-version of commit $1 (no tags yet).
pseudo_version() {
	local t h
	t=$(TZ=UTC git -C "$DLOCK_ROOT" show -s --date=format-local:%Y%m%d%H%M%S --format=%cd "$1")
	h=$(git -C "$DLOCK_ROOT" rev-parse --short=12 "$1")
	printf 'v0.0.0-%s-%s\n' "$t" "$h"
}
