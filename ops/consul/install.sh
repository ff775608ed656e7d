#!/usr/bin/env bash
# Install Consul 1.8.7 (MPL-2.0) from Debian 11's package archive into a cache
# outside the repository, without touching the machine's own apt sources.
#
#   ops/consul/install.sh            # installs into ${ZMQUEUE_CACHE:-~/.cache/zmqueue}
#
# Idempotent: a second run finds the binary and does nothing. Prints the
# binary's path on the last line. The binary is also linked into the active
# Python environment's bin directory (if writable) so `consul` is on the
# project's PATH.
set -euo pipefail

VERSION_PREFIX="1.8.7"
CACHE="${ZMQUEUE_CACHE:-$HOME/.cache/zmqueue}"
DEST="$CACHE/consul-$VERSION_PREFIX"
BIN="$DEST/usr/bin/consul"

link_into_env() {
    local bindir
    bindir="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null || true)"
    if [ -n "${VIRTUAL_ENV:-}" ]; then bindir="$VIRTUAL_ENV/bin"; fi
    if [ -n "$bindir" ] && [ -d "$bindir" ] && [ -w "$bindir" ]; then
        ln -sf "$BIN" "$bindir/consul"
    fi
}

if [ -x "$BIN" ] && "$BIN" version 2>/dev/null | grep -q "Consul v$VERSION_PREFIX"; then
    link_into_env
    echo "$BIN"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
    echo "error: apt-get and dpkg are needed to fetch Consul from Debian's archive;" \
         "install Consul $VERSION_PREFIX by hand and set ZMQUEUE_CONSUL_BIN" >&2
    exit 1
fi

APTDIR="$CACHE/apt"
mkdir -p "$APTDIR/lists/partial" "$APTDIR/archives/partial" "$DEST"
echo "deb http://deb.debian.org/debian bullseye main" > "$APTDIR/sources.list"
APT_OPTS=(
    -o "Dir::Etc::SourceList=$APTDIR/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$APTDIR/lists"
    -o "Dir::Cache::Archives=$APTDIR/archives"
    -o "Debug::NoLocking=1"
    -o "APT::Get::List-Cleanup=0"
    -o "APT::Sandbox::User=root"
)
echo "fetching the Debian 11 package index (private sources list in $APTDIR)..." >&2
apt-get "${APT_OPTS[@]}" -qq update >&2
rm -f "$APTDIR"/consul_*.deb
(cd "$APTDIR" && apt-get "${APT_OPTS[@]}" -qq download "consul=${VERSION_PREFIX}*" >&2)
DEB="$(ls "$APTDIR"/consul_*.deb | head -n 1)"
dpkg -x "$DEB" "$DEST"
"$BIN" version | grep -q "Consul v$VERSION_PREFIX" || {
    echo "error: $BIN is not Consul $VERSION_PREFIX" >&2; exit 1; }
link_into_env
"$BIN" version >&2
echo "$BIN"
