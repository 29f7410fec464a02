#!/usr/bin/env bash
# Installs what the tests need, builds everything in release mode, runs the Rust
# unit and integration tests and each fuzz target for a few seconds, then the
# cross-client compatibility suite against the release binary, then builds and
# checks the Debian package, the systemd unit and the container image's
# configuration. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup-build-deps.sh
scripts/setup-test-deps.sh
cargo build --release --all-targets
cargo test --release
scripts/fuzz.sh 5
LAVINMQ_BIN=target/release/lavinmq tests/compat/run.sh
scripts/check-package.sh
