#!/usr/bin/env bash
# Installs what building the Debian package needs on a fresh Debian 12
# machine, and is quick when everything is present:
#   - the build's own needs (scripts/setup-build-deps.sh: C linker, protoc,
#     Rust)
#   - `strip` (binutils), with which cargo-deb and `make rpm` strip the
#     binaries
#   - cargo-deb and cargo-generate-rpm, pinned, from crates.io (`cargo
#     install`, compiled here once: about 1.5 and 3 minutes on 2 cores)
#   - `rpm` (Debian's package), with which scripts/check-package.sh reads the
#     RPM package
# Source it (`. scripts/setup-package-deps.sh`) to get cargo on PATH in the
# caller.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Defines apt_install and puts cargo on PATH.
. "$ROOT/scripts/setup-build-deps.sh"

# The version [package.metadata.deb] in Cargo.toml was written for (where it
# puts the unit, how it strips); change it deliberately.
CARGO_DEB_VERSION=3.8.0
# Likewise for [package.metadata.generate-rpm].
CARGO_GENERATE_RPM_VERSION=0.21.1

if ! command -v strip >/dev/null 2>&1; then
    apt_install binutils
fi
if ! command -v rpm >/dev/null 2>&1; then
    apt_install rpm
fi

if [ "$(cargo deb --version 2>/dev/null)" = "cargo-deb $CARGO_DEB_VERSION" ]; then
    echo "[setup-package-deps] cargo-deb $CARGO_DEB_VERSION present"
else
    echo "[setup-package-deps] installing cargo-deb $CARGO_DEB_VERSION (compiles it, about 1.5 minutes)"
    cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked --quiet
fi
if [ "$(cargo generate-rpm --version 2>/dev/null)" = "cargo-generate-rpm $CARGO_GENERATE_RPM_VERSION" ]; then
    echo "[setup-package-deps] cargo-generate-rpm $CARGO_GENERATE_RPM_VERSION present"
else
    echo "[setup-package-deps] installing cargo-generate-rpm $CARGO_GENERATE_RPM_VERSION (compiles it, about 3 minutes)"
    cargo install cargo-generate-rpm --version "$CARGO_GENERATE_RPM_VERSION" --locked --quiet
fi
