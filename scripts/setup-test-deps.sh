#!/usr/bin/env bash
# Installs everything the test suites need on a fresh Debian 12 machine.
# Idempotent and quick when everything is already present.
#   - the build's own needs (scripts/setup-build-deps.sh: C linker, Rust)
#   - Python 3 and a venv at ./.venv with pinned pika, kombu, pytest, requests,
#     paho-mqtt, python-qpid-proton and rabbitmq-amqp-python-client
#   - npm packages for tests/compat/node (amqplib, mqtt, playwright-core and
#     rhea, pinned)
#   - Debian's chromium, which the browser tests of the management UI drive
#     (tests/compat/node/ui_e2e.js)
#   - Debian's etcd-server: the clustering tests start private etcd servers
#   - Debian's fuse3: the power-loss test mounts a FUSE filesystem
#   - Debian's rabbitmq-server: a shovel test moves messages to and from a
#     private RabbitMQ node (its own name, ports and data dir)
# Installs nothing of the broker itself.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

# The build's needs first (C linker, Rust); this also defines apt_install.
. "$ROOT/scripts/setup-build-deps.sh"

log() { echo "[setup-test-deps] $*"; }

# --- Python venv ---------------------------------------------------------
PY="${PYTHON:-python3}"
if ! command -v "$PY" >/dev/null 2>&1; then
    apt_install python3 python3-venv
fi
REQ="$ROOT/tests/compat/requirements.txt"
VENV="$ROOT/.venv"
STAMP="$VENV/.compat-requirements"
if [ -f "$STAMP" ] && cmp -s "$REQ" "$STAMP" \
    && "$VENV/bin/python" -c 'import pika, kombu, pytest, requests, paho.mqtt' >/dev/null 2>&1; then
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

# --- FUSE (the power-loss test's filesystem) --------------------------------
if ! command -v fusermount3 >/dev/null 2>&1; then
    apt_install fuse3
fi

# --- Node packages -------------------------------------------------------
NODE_DIR="$ROOT/tests/compat/node"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt_install nodejs npm
fi
NSTAMP="$NODE_DIR/node_modules/.compat-package.json"
if [ -d "$NODE_DIR/node_modules/amqplib" ] && [ -d "$NODE_DIR/node_modules/mqtt" ] \
    && [ -d "$NODE_DIR/node_modules/playwright-core" ] && [ -d "$NODE_DIR/node_modules/rhea" ] \
    && [ -f "$NSTAMP" ] && cmp -s "$NODE_DIR/package.json" "$NSTAMP"; then
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

# --- Chromium for the UI tests ----------------------------------------------
# Debian's own build (playwright-core downloads no browser); it runs headless,
# so no display server is needed, and fonts-dejavu-core gives pages a font.
if [ -x /usr/bin/chromium ]; then
    log "chromium present ($(/usr/bin/chromium --version 2>/dev/null | head -n 1))"
else
    apt_install chromium fonts-dejavu-core
    log "chromium installed ($(/usr/bin/chromium --version 2>/dev/null | head -n 1))"
fi

# --- etcd for the clustering tests ---------------------------------------------
# The tests start their own etcd on free ports with a temporary data dir.
if command -v etcd >/dev/null 2>&1; then
    log "etcd present ($(etcd --version 2>/dev/null | head -n 1))"
else
    apt_install etcd-server
    log "etcd installed ($(etcd --version 2>/dev/null | head -n 1))"
fi

# --- RabbitMQ for the shovel test against a real RabbitMQ ---------------------
# tests/http/parameters_limits/shovel/rabbitmq.rs runs its own node from
# /usr/lib/rabbitmq/bin; the package's system service is not used, and must not
# start: it would take the default ports (5672, 15672) other tests bind.
if [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    log "rabbitmq-server present"
else
    POLICY=/usr/sbin/policy-rc.d
    ADDED_POLICY=0
    if [ ! -e "$POLICY" ]; then
        # Exit code 101 tells Debian's maintainer scripts not to start services.
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
        $SUDO chmod 755 "$POLICY"
        ADDED_POLICY=1
    fi
    apt_install rabbitmq-server
    [ "$ADDED_POLICY" = 1 ] && $SUDO rm -f "$POLICY"
    log "rabbitmq-server installed (service not started)"
fi

log "done"
