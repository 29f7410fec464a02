#!/usr/bin/env bash
# Installs what building the Debian package needs on a fresh Debian 12
# machine, and is quick when everything is present:
#   - the build's own needs (scripts/setup-build-deps.sh: C linker, protoc,
#     Rust)
#   - `strip` (binutils), with which cargo-deb strips the binaries
#   - cargo-deb, pinned, from crates.io (`cargo install`, compiled here: about
#     1.5 minutes on 2 cores, once)
# Source it (`. scripts/setup-package-deps.sh`) to get cargo on PATH in the
# caller.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Defines apt_install and puts cargo on PATH.
. "$ROOT/scripts/setup-build-deps.sh"

# The version [package.metadata.deb] in Cargo.toml was written for (where it
# puts the unit, how it strips); change it deliberately.
CARGO_DEB_VERSION=3.8.0

if ! command -v strip >/dev/null 2>&1; then
    apt_install binutils
fi

if [ "$(cargo deb --version 2>/dev/null)" = "cargo-deb $CARGO_DEB_VERSION" ]; then
    echo "[setup-package-deps] cargo-deb $CARGO_DEB_VERSION present"
else
    echo "[setup-package-deps] installing cargo-deb $CARGO_DEB_VERSION (compiles it, about 1.5 minutes)"
    cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked --quiet
fi
