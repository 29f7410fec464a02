#!/usr/bin/env bash
# Installs everything the test suites need on a fresh Debian 12 machine.
# Idempotent and quick when everything is already present.
#   - checks that a Rust toolchain (cargo) exists
#   - Python venv at ./.venv with pinned pika, kombu, pytest
#   - npm packages for tests/compat/node (amqplib, pinned)
# Installs nothing of the broker itself.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

log() { echo "[setup-test-deps] $*"; }

APT_UPDATED=0
apt_install() {
    if ! command -v apt-get >/dev/null 2>&1; then
        log "ERROR: need Debian packages '$*' but apt-get is not available" >&2
        exit 1
    fi
    if [ "$APT_UPDATED" = 0 ]; then
        apt-get update -qq
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

# --- Rust toolchain -------------------------------------------------------
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! cargo --version >/dev/null 2>&1; then
    log "ERROR: no Rust toolchain found (cargo missing)." >&2
    log "Install Rust (e.g. rustup, stable toolchain) and make sure 'cargo' is on PATH." >&2
    exit 1
fi
log "rust: $(cargo --version)"

# --- Python venv ---------------------------------------------------------
PY="${PYTHON:-python3}"
if ! command -v "$PY" >/dev/null 2>&1; then
    apt_install python3 python3-venv python3-pip
fi
REQ="$ROOT/tests/compat/requirements.txt"
VENV="$ROOT/.venv"
STAMP="$VENV/.compat-requirements"
if [ -f "$STAMP" ] && cmp -s "$REQ" "$STAMP" \
    && "$VENV/bin/python" -c 'import pika, kombu, pytest' >/dev/null 2>&1; then
    log "python venv up to date ($VENV)"
else
    if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
        rm -rf "$VENV"   # missing or broken (e.g. its base interpreter is gone)
        if ! "$PY" -m venv "$VENV" >/dev/null 2>&1; then
            rm -rf "$VENV"
            apt_install python3-venv
            "$PY" -m venv "$VENV"
        fi
    fi
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ"
    cp "$REQ" "$STAMP"
    log "python venv ready ($VENV)"
fi

# --- Node packages -------------------------------------------------------
NODE_DIR="$ROOT/tests/compat/node"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt_install nodejs npm
fi
NSTAMP="$NODE_DIR/node_modules/.compat-package.json"
if [ -d "$NODE_DIR/node_modules/amqplib" ] && [ -f "$NSTAMP" ] && cmp -s "$NODE_DIR/package.json" "$NSTAMP"; then
    log "node modules up to date ($NODE_DIR/node_modules)"
else
    (
        cd "$NODE_DIR"
        if [ -f package-lock.json ]; then
            npm ci --no-audit --no-fund --loglevel=error
        else
            npm install --no-audit --no-fund --loglevel=error
        fi
    )
    cp "$NODE_DIR/package.json" "$NSTAMP"
    log "node modules ready ($NODE_DIR/node_modules)"
fi

log "done"
