# Container image of the LavinMQ broker, with lavinmqctl and lavinmqperf.
#
#   docker build -t lavinmq .
#   docker run -d --name lavinmq -p 5672:5672 -p 15672:15672 \
#       -v lavinmq-data:/var/lib/lavinmq lavinmq
#
# Configuration: LAVINMQ_* environment variables (LAVINMQ_AMQP_PORT,
# LAVINMQ_DEFAULT_USER, LAVINMQ_TLS_CERT_PATH, ...; README.md), flags after
# the image name (`lavinmq --help`), or a config file mounted over
# /etc/lavinmq/lavinmq.ini (extras/docker/lavinmq.ini, which makes every
# listener bind to all interfaces). Flags override the environment, which
# overrides the file.
#
# The default user (guest/guest, created when the data dir is new) may log in
# only from loopback, that is from inside the container, so that a published
# port never accepts a well-known password (LavinMQ's own image turns this
# guard off; this one does not). Give the default user a password of your
# own and the guard is lifted for it (extras/docker/entrypoint.sh):
#   -e LAVINMQ_DEFAULT_USER=admin \
#   -e LAVINMQ_DEFAULT_PASSWORD="$(docker run --rm --entrypoint lavinmqctl lavinmq hash_password 's3cret')"
# or add users through the control socket:
#   docker exec lavinmq lavinmqctl add_user app s3cret
#   docker exec lavinmq lavinmqctl set_permissions app '.*' '.*' '.*'
#
# A graceful stop closes every connection and syncs the data files: give it
# more than Docker's default 10 s (`docker run --stop-timeout 60`, Compose's
# stop_grace_period). The build needs BuildKit (Docker 23 and later) or
# Podman/Buildah, for the cache mounts.

# --- Build stage ----------------------------------------------------------------
# The official Rust image on Debian 12, the release of the runtime stage below
# (so the binaries link the same glibc), pinned: a new Rust is a deliberate
# change here. It brings gcc (Rust links with cc) and keeps cargo in
# /usr/local/cargo; protoc (the etcd client's build runs it) comes from Debian.
FROM rust:1.95.0-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends protobuf-compiler \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what the build reads (.dockerignore keeps the rest out of the context):
# build.rs records build info, the management UI in static/ and views/ is
# compiled into the binary, and Cargo.toml names the benches.
COPY Cargo.toml Cargo.lock build.rs ./
COPY src src
COPY static static
COPY views views
COPY benches benches
# The registry and target dir are cache mounts, so a rebuild after a source
# change recompiles only this crate. The binaries leave the cache stripped of
# their debug info (the release profile keeps line tables: 250 MB).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bins \
    && mkdir -p /out \
    && cp target/release/lavinmq target/release/lavinmqctl target/release/lavinmqperf /out/ \
    && strip /out/*

# --- Runtime stage --------------------------------------------------------------
FROM debian:bookworm-slim
# ca-certificates: lavinmqperf checks amqps:// and mqtts:// servers against
# the system's CAs.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# The broker runs as lavinmq (uid/gid 999, fixed so that a volume's ownership
# stays valid across image versions). /run/lavinmq holds the control socket.
RUN groupadd --system --gid 999 lavinmq \
    && useradd --system --uid 999 --gid lavinmq --home-dir /var/lib/lavinmq \
        --no-create-home --shell /usr/sbin/nologin lavinmq \
    && install -d -o lavinmq -g lavinmq -m 0750 /var/lib/lavinmq /run/lavinmq
COPY --from=build /out/ /usr/bin/
COPY extras/docker/lavinmq.ini /etc/lavinmq/lavinmq.ini
COPY extras/docker/entrypoint.sh /usr/local/bin/lavinmq-entrypoint
COPY LICENSE /usr/share/doc/lavinmq/LICENSE

# Data dir (the default, spelled out) and control socket. lavinmqctl reads
# its own variable, so `docker exec lavinmq lavinmqctl ...` and the health
# check find the socket. One variable per ENV line: scripts/check-package.sh
# starts the broker with them.
ENV LAVINMQ_DATADIR=/var/lib/lavinmq
ENV LAVINMQ_CONTROL_UNIX_PATH=/run/lavinmq/lavinmqctl.sock
ENV LAVINMQCTL_CONTROL_UNIX_PATH=/run/lavinmq/lavinmqctl.sock

# Numeric, so that Kubernetes' runAsNonRoot can verify it is not root.
USER 999:999
WORKDIR /var/lib/lavinmq
VOLUME /var/lib/lavinmq
# AMQP, AMQPS, MQTT, MQTTS, HTTP API/UI, HTTPS, Prometheus metrics. The TLS
# ports open only with a certificate (LAVINMQ_TLS_CERT_PATH/_KEY_PATH).
EXPOSE 5672 5671 1883 8883 5552 15672 15671 15692
# Healthy when the broker answers on its control socket. start-period covers
# the recovery of a large data dir at start.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["lavinmqctl", "status"]
# The entry point execs the broker, which is then PID 1 and handles SIGTERM
# itself (graceful shutdown).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/lavinmq-entrypoint"]
