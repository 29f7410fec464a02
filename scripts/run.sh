#!/usr/bin/env bash
# Builds the broker and runs it with the embedded default configuration and the
# data directory ./tmp/data. Extra arguments go to the broker (e.g. -p 5673).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup-build-deps.sh
cargo build --release --bin lavinmq
mkdir -p ./tmp/data
exec ./target/release/lavinmq -D ./tmp/data "$@"
