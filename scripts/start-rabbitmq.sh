#!/usr/bin/env bash
# Start a local reference RabbitMQ (Debian's rabbitmq-server) for compatibility
# checks and side-by-side benchmarks. Not part of the regular test setup.
#   node name  compat@localhost  (override: RABBITMQ_COMPAT_NODENAME)
#   AMQP port  5682 on 127.0.0.1  (override: RABBITMQ_COMPAT_PORT)
#   dist port  25682              (override: RABBITMQ_COMPAT_DIST_PORT)
# URL: amqp://guest:guest@127.0.0.1:5682/%2F
set -euo pipefail

NODE="${RABBITMQ_COMPAT_NODENAME:-compat@localhost}"
PORT="${RABBITMQ_COMPAT_PORT:-5682}"
DIST_PORT="${RABBITMQ_COMPAT_DIST_PORT:-25682}"
BASE="${RABBITMQ_COMPAT_BASE:-/tmp/rabbitmq-compat}"

if ! command -v rabbitmq-server >/dev/null 2>&1 && [ ! -x /usr/sbin/rabbitmq-server ]; then
    apt-get update -qq
    # policy-rc.d may refuse to start the system service; that's fine, we start our own node.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server
fi
# Call the real scripts, not Debian's /usr/sbin wrappers (those su to the
# 'rabbitmq' user and use its cookie/home); we run the node as the current user
# with a private HOME (Erlang cookie lives there).
RMQ_BIN=/usr/lib/rabbitmq/bin
mkdir -p "$BASE/home"
export HOME="$BASE/home"
rabbitmqctl() { "$RMQ_BIN/rabbitmqctl" "$@"; }

if rabbitmqctl -n "$NODE" status >/dev/null 2>&1; then
    echo "RabbitMQ node $NODE already running (amqp://guest:guest@127.0.0.1:$PORT/%2F)"
    exit 0
fi

mkdir -p "$BASE/mnesia" "$BASE/log"
export RABBITMQ_NODENAME="$NODE"
export RABBITMQ_NODE_PORT="$PORT"
export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
export RABBITMQ_DIST_PORT="$DIST_PORT"
export RABBITMQ_MNESIA_BASE="$BASE/mnesia"
export RABBITMQ_LOG_BASE="$BASE/log"
export RABBITMQ_PID_FILE="$BASE/rabbitmq.pid"
# Disable the optional listeners/plugins that could collide with other nodes.
export RABBITMQ_ENABLED_PLUGINS_FILE="$BASE/enabled_plugins"
[ -f "$RABBITMQ_ENABLED_PLUGINS_FILE" ] || echo '[].' > "$RABBITMQ_ENABLED_PLUGINS_FILE"
export RABBITMQ_CONFIG_FILE="$BASE/rabbitmq"   # no extension: rabbitmq.conf
[ -f "$BASE/rabbitmq.conf" ] || cat > "$BASE/rabbitmq.conf" <<CONF
loopback_users = none
CONF

# epmd is needed for the distribution; rabbitmq-server starts it if missing.
"$RMQ_BIN/rabbitmq-server" -detached
# await_startup errors out while the node is not yet registered with epmd,
# so retry it for up to 90 s.
ok=0
for _ in $(seq 1 45); do
    if rabbitmqctl -n "$NODE" await_startup >/dev/null 2>&1; then ok=1; break; fi
    sleep 2
done
if [ "$ok" != 1 ]; then
    echo "RabbitMQ failed to start; logs in $BASE/log" >&2
    tail -n 50 "$BASE"/log/*.log >&2 || true
    exit 1
fi
echo "RabbitMQ $NODE running: amqp://guest:guest@127.0.0.1:$PORT/%2F"
