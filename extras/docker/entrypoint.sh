#!/bin/sh
# Entry point of the container image: starts the broker with the arguments
# given to `docker run`. The default user stays loopback-only (reachable from
# inside the container only) unless the operator chose its password with
# LAVINMQ_DEFAULT_PASSWORD (a password hash, see `lavinmqctl hash_password`):
# a published port then accepts that user, and never the well-known guest/guest.
set -eu
case " $* " in
*default-user-only-loopback*) ;;
*)
    if [ -n "${LAVINMQ_DEFAULT_PASSWORD:-}" ]; then
        set -- --default-user-only-loopback=false "$@"
    fi
    ;;
esac
exec /usr/bin/lavinmq "$@"
