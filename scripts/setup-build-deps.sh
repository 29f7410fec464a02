#!/usr/bin/env bash
# Installs what building the broker needs on a fresh Debian 12 machine, and is
# quick when everything is present:
#   - a C toolchain (Rust links with `cc`)
#   - protoc (Debian's protobuf-compiler), which the etcd client's build runs,
#     with the well-known .proto files it imports (libprotobuf-dev)
#   - a Rust toolchain: the stable one from rustup when `cargo` is missing
#     (Debian's own rustc is too old for this code)
# Source it (`. scripts/setup-build-deps.sh`) to get cargo on PATH in the caller.
set -euo pipefail

log() { echo "[setup-build-deps] $*"; }

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
APT_UPDATED=0
apt_install() {
    if ! command -v apt-get >/dev/null 2>&1; then
        log "ERROR: need Debian packages '$*' but apt-get is not available" >&2
        exit 1
    fi
    if [ "$APT_UPDATED" = 0 ]; then
        $SUDO apt-get update -qq
        APT_UPDATED=1
    fi
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

if ! command -v cc >/dev/null 2>&1; then
    apt_install gcc libc6-dev
fi

if ! command -v protoc >/dev/null 2>&1 || [ ! -f /usr/include/google/protobuf/descriptor.proto ]; then
    apt_install protobuf-compiler libprotobuf-dev
fi

if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! cargo --version >/dev/null 2>&1; then
    log "no Rust toolchain: installing the stable one with rustup"
    if ! command -v curl >/dev/null 2>&1; then
        apt_install curl ca-certificates
    fi
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    export PATH="$HOME/.cargo/bin:$PATH"
fi
log "rust: $(cargo --version)"

# release_bins_fresh NAME...: true when every target/release/NAME exists and
# no build input (sources, the UI, the manifest, the lock file, the build
# script) changed after any of them was linked. Lets a script reuse binaries
# that `cargo build --release --all-targets` (scripts/test.sh) made: asked
# for the binaries alone, cargo would compile most dependencies again, since
# the dev-dependencies' features that the test build unified into them are
# then left out, and so is every crate above them.
release_bins_fresh() {
    local root b
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    for b in "$@"; do
        [ -x "$root/target/release/$b" ] || return 1
        if [ -n "$(cd "$root" && find src static views Cargo.toml Cargo.lock build.rs \
            -newer "target/release/$b" -print -quit 2>/dev/null)" ]; then
            return 1
        fi
    done
}
