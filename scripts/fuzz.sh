#!/usr/bin/env bash
# Runs every coverage-guided fuzz target in fuzz/ for SECONDS each (default 10):
# `make fuzz FUZZ_SECS=N` for long runs, the test command for a few seconds so
# that the targets keep building and their regressions keep passing.
#
# cargo-fuzz drives libFuzzer; `--sanitizer none` lets it build with the stable
# toolchain (AddressSanitizer needs nightly; the broker has no unsafe code on
# these paths, and panics, overflows and hangs are what the targets look for).
# Each target first runs the inputs in fuzz/regressions/<target>/ (every crash
# found so far), then mutates from the committed seeds in fuzz/seeds/<target>/
# and from what earlier runs found (fuzz/corpus/<target>/, not committed). A
# crash leaves its input in fuzz/artifacts/<target>/ and fails the script.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${1:-10}"
export PATH="$HOME/.cargo/bin:$PATH"
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "[fuzz] installing cargo-fuzz"
    cargo install cargo-fuzz --locked --quiet
fi
cargo fuzz build --sanitizer none -O
for target in $(cargo fuzz list); do
    mkdir -p "corpus/$target"
    if compgen -G "regressions/$target/*" >/dev/null; then
        echo "[fuzz] $target: regressions"
        cargo fuzz run --sanitizer none -O "$target" regressions/"$target"/* -- -runs=1
    fi
    echo "[fuzz] $target: ${secs}s"
    cargo fuzz run --sanitizer none -O "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$secs" -timeout=10 -print_final_stats=1 2>&1 |
        grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|Done)|panicked|ERROR|SUMMARY|Test unit written' || true
    # The pipe hides cargo-fuzz's status: a crash shows as an artifact.
    if compgen -G "artifacts/$target/*" >/dev/null; then
        echo "[fuzz] $target found a crash: $(ls artifacts/"$target")" >&2
        exit 1
    fi
done
echo "[fuzz] done"
