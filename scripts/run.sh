#!/usr/bin/env bash
# Builds the broker and runs it with the embedded default configuration and the
# data directory ./tmp/data. Extra arguments go to the broker (e.g. -p 5673).
#
# A target/release/lavinmq newer than every source file (e.g. from
# scripts/test.sh) is run as it is: `cargo build --release --bin lavinmq`
# after test.sh's `cargo build --release --all-targets` would compile most
# dependencies again with another feature set (see release_bins_fresh in
# scripts/setup-build-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup-build-deps.sh
if release_bins_fresh lavinmq; then
    echo "[run] target/release/lavinmq is newer than the sources: not building"
else
    cargo build --release --bin lavinmq
fi
mkdir -p ./tmp/data
exec ./target/release/lavinmq -D ./tmp/data "$@"
