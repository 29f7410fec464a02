#!/usr/bin/env bash
# Cross-client compatibility tests (pika/pytest with paho-mqtt and rstream for
# the stream protocol, kombu, amqplib, mqtt.js), then the management UI's
# end-to-end tests in headless Chromium (tests/compat/node/ui_e2e.js,
# screenshots of every page in target/ui-screenshots/). The broker started here also accepts OAuth 2
# tokens from a small identity provider (tests/compat/node/oidc_provider.js)
# and offers its UI single sign-on through it.
#
# Builds nothing. Either
#   - starts the broker binary $LAVINMQ_BIN (default target/release/lavinmq) on
#     a free loopback port with a fresh data dir, or
#   - with COMPAT_TARGET_URL=amqp://... runs against an already running broker
#     (e.g. a reference RabbitMQ started by scripts/start-rabbitmq.sh); set
#     MGMT_URL=http://user:pass@host:port for its management API and
#     STREAM_PORT (default 5552) for its stream protocol port.
#
# Other knobs:
#   LAVINMQ_ARGS     extra arguments for the broker binary
#   PYTEST_ARGS      extra arguments for pytest (e.g. "-k topic -x")
#   COMPAT_RECORD    file to append broker error replies to (see conftest.py)
#   LAVINMQ_HTTP_URL with COMPAT_TARGET_URL: the broker's HTTP port for the UI
#                    tests (http://host:port); without it they are left out
#   UI_E2E=0         leave the UI tests out
# Requires scripts/setup-test-deps.sh to have been run (.venv, node_modules).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
COMPAT="$ROOT/tests/compat"
PY="$ROOT/.venv/bin/python"

if [ ! -x "$PY" ] || [ ! -d "$COMPAT/node/node_modules/amqplib" ] || [ ! -d "$COMPAT/node/node_modules/mqtt" ] \
    || [ ! -d "$COMPAT/node/node_modules/playwright-core" ] || [ ! -d "$COMPAT/node/node_modules/rhea" ]; then
    echo "compat: test dependencies missing; run scripts/setup-test-deps.sh first" >&2
    exit 2
fi

BROKER_PID=""
BROKER_LOG=""
DATA_DIR=""
OIDC_PID=""
OIDC_LOG=""
CONFIG_FILE=""
cleanup() {
    if [ -n "$OIDC_PID" ]; then
        kill -TERM "$OIDC_PID" 2>/dev/null || true
        wait "$OIDC_PID" 2>/dev/null || true
    fi
    [ -n "$OIDC_LOG" ] && rm -f "$OIDC_LOG"
    [ -n "$CONFIG_FILE" ] && rm -f "$CONFIG_FILE"
    if [ -n "$BROKER_PID" ] && kill -0 "$BROKER_PID" 2>/dev/null; then
        kill -TERM "$BROKER_PID" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$BROKER_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$BROKER_PID" 2>/dev/null || true
        wait "$BROKER_PID" 2>/dev/null || true
    fi
    [ -n "$DATA_DIR" ] && rm -rf "$DATA_DIR"
    [ -n "$BROKER_LOG" ] && rm -f "$BROKER_LOG"
    return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${COMPAT_TARGET_URL:-}" ]; then
    export AMQP_URL="$COMPAT_TARGET_URL"
    echo "compat: using existing broker at $AMQP_URL"
    HOST_PORT="$("$PY" -c 'import sys; from urllib.parse import urlsplit; u = urlsplit(sys.argv[1]); print(u.hostname or "127.0.0.1", u.port or 5672)' "$AMQP_URL")"
    export STREAM_HOST="${STREAM_HOST:-${HOST_PORT%% *}}"
    export STREAM_PORT="${STREAM_PORT:-5552}"
else
    BIN="${LAVINMQ_BIN:-target/release/lavinmq}"
    if [ ! -x "$BIN" ]; then
        echo "compat: broker binary '$BIN' not found or not executable (build it first)" >&2
        exit 2
    fi
    # Five distinct free ports, all bound at once so that none is handed
    # out twice.
    read -r PORT HTTP_PORT MQTT_PORT STREAM_PORT OIDC_PORT < <("$PY" -c '
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
')
    DATA_DIR="$(mktemp -d)"
    BROKER_LOG="$(mktemp)"
    OIDC_LOG="$(mktemp)"
    # The identity provider first: the broker fetches its keys at the first
    # token login.
    node "$COMPAT/node/oidc_provider.js" "$OIDC_PORT" >"$OIDC_LOG" 2>&1 &
    OIDC_PID=$!
    for _ in $(seq 1 100); do
        grep -q "oidc provider ready" "$OIDC_LOG" && break
        sleep 0.1
    done
    if ! grep -q "oidc provider ready" "$OIDC_LOG"; then
        echo "compat: the identity provider did not start:" >&2
        cat "$OIDC_LOG" >&2
        exit 1
    fi
    export OIDC_ISSUER="http://127.0.0.1:$OIDC_PORT"
    CONFIG_FILE="$(mktemp --suffix=.ini)"
    cat >"$CONFIG_FILE" <<INI
[main]
auth_backends = local,oauth

[oauth]
issuer = $OIDC_ISSUER
resource_server_id = lavinmq
client_id = lavinmq-ui
mgmt_base_url = http://127.0.0.1:$HTTP_PORT
INI
    # shellcheck disable=SC2086
    "$BIN" -c "$CONFIG_FILE" -D "$DATA_DIR" -p "$PORT" --amqp-bind 127.0.0.1 --http-bind 127.0.0.1 --http-port "$HTTP_PORT" --mqtt-bind 127.0.0.1 --mqtt-port "$MQTT_PORT" --stream-bind 127.0.0.1 --stream-port "$STREAM_PORT" --metrics-http-port 0 --control-unix-path "$DATA_DIR/ctl.sock" ${LAVINMQ_ARGS:-} >"$BROKER_LOG" 2>&1 &
    BROKER_PID=$!
    export AMQP_URL="amqp://guest:guest@127.0.0.1:$PORT/%2F"
    export MGMT_URL="http://guest:guest@127.0.0.1:$HTTP_PORT"
    export MQTT_URL="mqtt://127.0.0.1:$MQTT_PORT"
    export STREAM_HOST="127.0.0.1"
    export STREAM_PORT
    export LAVINMQ_HTTP_URL="http://127.0.0.1:$HTTP_PORT"
    HOST_PORT="127.0.0.1 $PORT"
    echo "compat: started $BIN (pid $BROKER_PID) on 127.0.0.1:$PORT"
fi

# Wait (max 20 s) until the AMQP port accepts TCP connections.
if ! "$PY" - "$HOST_PORT" "${BROKER_PID:-}" <<'PYEOF'
import os, socket, sys, time
host, port = sys.argv[1].split()
pid = sys.argv[2] if len(sys.argv) > 2 else ""
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    if pid:
        try:
            os.kill(int(pid), 0)
            # A zombie still answers kill(0): check its state too.
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ", 1)[1].startswith("Z"):
                    raise ProcessLookupError
        except (ProcessLookupError, FileNotFoundError):
            print("compat: broker process exited during startup", file=sys.stderr)
            sys.exit(1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
print(f"compat: {host}:{port} did not accept connections within 20 s", file=sys.stderr)
sys.exit(1)
PYEOF
then
    if [ -n "$BROKER_LOG" ]; then
        echo "----- broker log ($BROKER_LOG) -----" >&2
        cat "$BROKER_LOG" >&2 || true
        echo "----- end of broker log -----" >&2
    fi
    exit 1
fi

FAILED=()

echo "== kombu smoke test"
if ! timeout 60 "$PY" "$COMPAT/kombu_smoke.py"; then FAILED+=("kombu"); fi

echo "== amqplib smoke test"
if ! timeout 60 node "$COMPAT/node/amqplib_smoke.js"; then FAILED+=("amqplib"); fi

echo "== rhea smoke test (AMQP 1.0)"
if ! timeout 60 node "$COMPAT/node/rhea_amqp1.js"; then FAILED+=("rhea"); fi

echo "== mqtt.js smoke test (WebSocket and TCP)"
if ! timeout 60 node "$COMPAT/node/mqttjs_websocket.js"; then FAILED+=("mqtt.js"); fi

echo "== pika test suite (pytest)"
# shellcheck disable=SC2086
if ! (cd "$COMPAT/python" && timeout 300 "$PY" -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-}); then
    FAILED+=("pytest")
fi

if [ "${UI_E2E:-1}" = 0 ]; then
    echo "== management UI in headless Chromium: left out (UI_E2E=0)"
elif [ -z "${LAVINMQ_HTTP_URL:-}" ]; then
    echo "== management UI in headless Chromium: left out (no LAVINMQ_HTTP_URL for the broker at $AMQP_URL)"
else
    echo "== management UI in headless Chromium (screenshots in target/ui-screenshots/)"
    if ! (cd "$COMPAT/node" && timeout 420 node --test-reporter=spec ui_e2e.js); then
        FAILED+=("ui-e2e")
    fi
fi

if [ -n "$BROKER_PID" ] && ! kill -0 "$BROKER_PID" 2>/dev/null; then
    echo "compat: broker process died during the tests" >&2
    FAILED+=("broker-exited")
fi

if [ "${#FAILED[@]}" -gt 0 ]; then
    if [ -n "$BROKER_LOG" ]; then
        echo "----- broker log (last 200 lines) -----" >&2
        tail -n 200 "$BROKER_LOG" >&2 || true
        echo "----- end of broker log -----" >&2
    fi
    echo "compat: FAILED: ${FAILED[*]}" >&2
    exit 1
fi
echo "compat: all suites OK"
