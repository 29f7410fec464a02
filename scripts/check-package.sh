#!/usr/bin/env bash
# Checks the packaging: the Debian package, the systemd unit and the container
# image's configuration. Meant to run after the release build (scripts/test.sh),
# whose binaries `make deb` reuses. Fails (non-zero) on any problem found;
# prints "skipped: ..." for a check this machine cannot run.
#
#   1. builds the .deb with `make deb`, from the binaries in target/release
#      when they are up to date (PACKAGE_DEB=path checks a given .deb)
#   2. its files: the three binaries (stripped, runnable), the unit and the
#      conffile identical to extras/, the copyright file
#   3. its control data: Depends, conffiles, maintainer scripts (syntax, the
#      cargo-deb systemd snippets in place)
#   4. the RPM package (`make rpm`, from the same binaries) against the .deb:
#      its files (`rpm -qp`) with their owners, modes and contents, the config
#      file, Requires, and its scriptlets, run in a scratch root as in step 5:
#      the same user, data dir and enabled unit as the .deb's postinst
#   5. install, reinstall, remove and purge in a scratch root: an overlay of
#      this machine's root in a private mount namespace, so the lavinmq user,
#      files and dpkg database entries exist only there. Checks the user, the
#      data dir, the enabled unit, `systemd-analyze verify` of the installed
#      unit, a start of the broker as lavinmq with the unit's environment (and
#      lavinmqctl through the control socket), and what purge leaves behind.
#      Then boots systemd in another such scratch root (systemd-nspawn) and
#      checks the unit there: the Type=notify start, reload, watchdog, stop
#      (CHECK_PACKAGE_BOOT=0 skips this)
#   6. the Dockerfile (a shell lint: stages, non-root USER, VOLUME,
#      HEALTHCHECK, EXPOSE, .dockerignore) and the image's configuration: the
#      broker started with the image's ini file and ENV lines, and the
#      HEALTHCHECK command run against it
#   7. builds and runs the image when podman or docker can (CHECK_PACKAGE_IMAGE=0
#      skips this; it compiles everything in the container, several minutes)
#
# Needs root for steps 4 and 5 (namespaces, mounts); without it they are skipped.
# shellcheck disable=SC2016 # single-quoted ${...} are dpkg-query formats or literal text
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SELF="$ROOT/scripts/check-package.sh"

# (not log(): setup-build-deps.sh, sourced below, defines its own)
say() { echo "[check-package] $*"; }
fail() {
    echo "[check-package] FAIL: $*" >&2
    exit 1
}
skip() { echo "[check-package] skipped: $*"; }

# The ports the Dockerfile must EXPOSE: AMQP, AMQPS, MQTT, MQTTS, the stream
# protocol, HTTP, HTTPS, metrics.
IMAGE_PORTS="5672 5671 1883 8883 5552 15672 15671 15692"

# Starts a broker in the background (the command in "$@", output in $LOG),
# waits until `$CTL status` answers on the control socket $SOCK, and sets
# BROKER_PID. $CTL may be a command prefix (e.g. a chroot).
start_broker_and_wait() {
    "$@" >"$LOG" 2>&1 &
    BROKER_PID=$!
    local _
    for _ in $(seq 1 100); do
        if $CTL --control-unix-path "$SOCK" status >/dev/null 2>&1; then
            return 0
        fi
        if ! kill -0 "$BROKER_PID" 2>/dev/null; then
            cat "$LOG" >&2
            fail "the broker exited at start ($*)"
        fi
        sleep 0.2
    done
    cat "$LOG" >&2
    kill -KILL "$BROKER_PID" 2>/dev/null || true
    fail "no answer on the control socket $SOCK within 20 s"
}

# Stops the broker started above with SIGTERM and expects exit status 0.
stop_broker() {
    kill -TERM "$BROKER_PID"
    local rc=0
    wait "$BROKER_PID" || rc=$?
    if [ "$rc" != 0 ]; then
        cat "$LOG" >&2
        fail "the broker exited with status $rc after SIGTERM"
    fi
}

# ---------------------------------------------------------------------------
# Steps 4 and 5 run the functions below as `check-package.sh __rpm DIR DEB
# SCRIPTS`, `check-package.sh __sandbox DIR DEB` and `check-package.sh __boot
# DIR DEB OUT`, each inside `unshare --mount`: their mounts vanish with the
# namespace.
# ---------------------------------------------------------------------------

# Builds a scratch root at $1/root: an overlay of this machine's root whose
# changes go to $1/upper on a tmpfs, with /dev, /proc, a fresh /run and /tmp,
# and the package $2 copied to /tmp/lavinmq.deb. Sets R; defines in_root and
# dpkg_in_root. Exits with 77, "cannot build it here", when mounts fail.
scratch_root() {
    local S="$1" DEB="$2"
    mount --make-rprivate / || exit 77
    mount -t tmpfs -o size=1g,mode=0700 lavinmq-check "$S" || exit 77
    mkdir "$S/upper" "$S/work" "$S/root"
    if ! mount -t overlay overlay -o "lowerdir=/,upperdir=$S/upper,workdir=$S/work" "$S/root"; then
        echo "overlayfs mount failed" >&2
        exit 77
    fi
    R="$S/root"
    mount --rbind /dev "$R/dev"
    mount -t proc proc "$R/proc"
    # A fresh /run and /tmp, as after boot. No /run/systemd/system: the
    # maintainer scripts then enable the unit but start nothing.
    mount -t tmpfs tmpfs "$R/run"
    mount -t tmpfs tmpfs "$R/tmp"
    # And in case they tried anyway: invoke-rc.d/deb-systemd-invoke ask this.
    printf '#!/bin/sh\nexit 101\n' >"$R/usr/sbin/policy-rc.d"
    chmod 755 "$R/usr/sbin/policy-rc.d"
    cp "$DEB" "$R/tmp/lavinmq.deb"

    # Runs a command in the scratch root with a clean environment.
    in_root() {
        chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
            DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"
    }
    # Runs dpkg there, showing its output only when it fails.
    dpkg_in_root() {
        local out
        if ! out=$(in_root dpkg "$@" 2>&1); then
            echo "$out" >&2
            fail "dpkg $* failed in the scratch root"
        fi
    }
}

expect() { # expect DESCRIPTION ACTUAL EXPECTED
    [ "$2" = "$3" ] || fail "$1: got '$2', expected '$3'"
}

# Install, checks, reinstall, remove, purge, and what purge leaves behind.
# Runs with its own PID namespace too: every process it starts dies with it.
sandbox_inner() {
    local S="$1" DEB="$2"
    scratch_root "$S" "$DEB"

    # --- install ---
    dpkg_in_root -i /tmp/lavinmq.deb
    expect "package status after install" "$(in_root dpkg-query -W -f='${Status}' lavinmq)" "install ok installed"
    local pw
    pw=$(in_root getent passwd lavinmq) || fail "postinst created no lavinmq user"
    local uid home shell
    uid=$(cut -d: -f3 <<<"$pw")
    home=$(cut -d: -f6 <<<"$pw")
    shell=$(cut -d: -f7 <<<"$pw")
    [ "$uid" -lt 1000 ] || fail "lavinmq is not a system user (uid $uid)"
    expect "lavinmq's home" "$home" /var/lib/lavinmq
    expect "lavinmq's shell" "$shell" /usr/sbin/nologin
    in_root getent group lavinmq >/dev/null || fail "postinst created no lavinmq group"
    expect "data dir owner and mode" "$(in_root stat -c '%U:%G %a' /var/lib/lavinmq)" "lavinmq:lavinmq 750"
    local wants=/etc/systemd/system/multi-user.target.wants/lavinmq.service
    [ -L "$R$wants" ] || fail "the unit was not enabled ($wants missing)"
    local unit
    unit=$(in_root dpkg -L lavinmq | grep '/systemd/system/lavinmq\.service$') || fail "no unit in dpkg -L"
    say "installed: user lavinmq (uid $uid), /var/lib/lavinmq, $unit enabled"

    # systemd-analyze verify prints problems (unknown keys, missing
    # commands, bad values) as warnings but may still exit 0: any line
    # naming the unit fails the check.
    local verify rc=0
    verify=$(in_root systemd-analyze verify "$unit" 2>&1) || rc=$?
    if [ "$rc" != 0 ] || grep -q 'lavinmq' <<<"$verify"; then
        echo "$verify" >&2
        fail "systemd-analyze verify $unit (status $rc)"
    fi
    [ -z "$verify" ] || say "systemd-analyze verify, about other units: $verify"
    say "systemd-analyze verify $unit: ok"
    # For information: systemd's rating of the sandboxing (0 best, 10 worst).
    say "systemd-analyze security: $(in_root systemd-analyze security --offline=true --no-pager "$unit" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: //p')"

    # --- start the broker as systemd would (no systemd here) ---
    # The unit's Environment= lines, plus what its *Directory= settings give:
    # the directories and their variables. Ports 0 (any free one), so that
    # nothing on this machine is in the way.
    local -a envs=(STATE_DIRECTORY=/var/lib/lavinmq CONFIGURATION_DIRECTORY=/etc/lavinmq
        RUNTIME_DIRECTORY=/run/lavinmq LOGS_DIRECTORY=/var/log/lavinmq)
    local line
    while IFS= read -r line; do
        envs+=("${line#Environment=}")
    done < <(grep '^Environment=' "$R$unit")
    in_root install -d -o lavinmq -g lavinmq -m 0750 /run/lavinmq /var/log/lavinmq
    SOCK=/run/lavinmq/lavinmqctl.sock
    CTL="in_root lavinmqctl"
    LOG="$S/broker.log"
    start_broker_and_wait chroot "$R" /usr/bin/env -i PATH=/usr/bin:/bin "${envs[@]}" \
        /usr/bin/setpriv --reuid=lavinmq --regid=lavinmq --init-groups -- \
        /bin/sh -c 'umask 0027 && exec /usr/bin/lavinmq -p 0 --mqtt-port 0 --stream-port 0 --http-port 0 --metrics-http-port -1'
    grep -q 'config file: /etc/lavinmq/lavinmq.ini' "$LOG" || fail "the broker did not read /etc/lavinmq/lavinmq.ini"
    grep -q 'data dir /var/lib/lavinmq' "$LOG" || fail "the broker did not use /var/lib/lavinmq"
    expect "control socket owner and mode" "$(in_root stat -c '%U:%G %a' "$SOCK")" "lavinmq:lavinmq 660"
    # lavinmqctl as a member of the lavinmq group (not root) reaches it too
    in_root setpriv --reuid=nobody --regid=lavinmq --clear-groups \
        lavinmqctl --control-unix-path "$SOCK" status >/dev/null ||
        fail "a member of the lavinmq group cannot use the control socket"
    stop_broker
    local foreign
    foreign=$(in_root find /var/lib/lavinmq ! -user lavinmq)
    [ -z "$foreign" ] || fail "files in the data dir not owned by lavinmq: $foreign"
    say "broker started as lavinmq with the unit's environment, answered lavinmqctl, stopped cleanly"

    # --- reinstall (the upgrade path of the scripts) ---
    dpkg_in_root -i /tmp/lavinmq.deb
    expect "lavinmq's uid after reinstall" "$(in_root id -u lavinmq)" "$uid"

    # --- remove: keeps the (changed) conffile and the data ---
    echo "; changed by check-package.sh" >>"$R/etc/lavinmq/lavinmq.ini"
    dpkg_in_root -r lavinmq
    expect "package status after remove" "$(in_root dpkg-query -W -f='${Status}' lavinmq)" "deinstall ok config-files"
    [ ! -e "$R/usr/bin/lavinmq" ] || fail "remove left /usr/bin/lavinmq"
    [ ! -e "$R$unit" ] || fail "remove left $unit"
    grep -q 'changed by check-package' "$R/etc/lavinmq/lavinmq.ini" || fail "remove did not keep the changed conffile"
    [ -d "$R/var/lib/lavinmq" ] || fail "remove deleted the data dir"

    # --- purge: deletes the conffile, data and logs; keeps the user ---
    dpkg_in_root --purge lavinmq
    expect "package status after purge" "$(in_root dpkg-query -W -f='${db:Status-Status}' lavinmq 2>/dev/null || echo not-installed)" "not-installed"
    local p
    for p in /etc/lavinmq /var/lib/lavinmq /var/log/lavinmq "$wants" /etc/systemd/system/lavinmq.service; do
        if [ -e "$R$p" ] || [ -L "$R$p" ]; then fail "purge left $p"; fi
    done
    in_root getent passwd lavinmq >/dev/null || fail "purge removed the lavinmq user (it should stay)"

    # What the whole run left in the scratch root: every file, symlink or
    # whiteout in the overlay's upper layer, and directories that did not
    # exist before. Expected: the user in the account files, dpkg's database
    # and log, this script's policy-rc.d, and directories the unit helpers
    # created (empty now). Nothing else, and nothing named lavinmq.
    local left=() unexpected=() rel
    while IFS= read -r -d '' rel; do
        rel="/${rel#./}"
        if [ -d "$S/upper$rel" ] && [ ! -L "$S/upper$rel" ] && [ -d "$rel" ]; then
            continue # a directory that exists anyway, copied up for its contents
        fi
        left+=("$rel")
        case "$rel" in
        /etc/passwd | /etc/passwd- | /etc/group | /etc/group- | /etc/shadow | /etc/shadow- | \
            /etc/gshadow | /etc/gshadow- | /etc/.pwd.lock | /usr/sbin/policy-rc.d | /var/log/dpkg.log) ;;
        /var/lib/dpkg/*lavinmq*) unexpected+=("$rel") ;;
        /var/lib/dpkg/*) ;;
        *lavinmq*) unexpected+=("$rel") ;;
        /etc/systemd/system/* | /var/lib/systemd/deb-systemd-helper-*)
            [ -d "$S/upper$rel" ] || unexpected+=("$rel")
            ;;
        *) unexpected+=("$rel") ;;
        esac
    done < <(cd "$S/upper" && find . -mindepth 1 -print0)
    if [ "${#unexpected[@]}" != 0 ]; then
        printf '  %s\n' "${unexpected[@]}" >&2
        fail "purge left unexpected files (above)"
    fi
    say "purge left only: $(printf '%s ' "${left[@]}" | sed 's#/var/lib/dpkg/[^ ]* ##g')(and dpkg's database)"
}

# Boots systemd in a scratch root with the package installed (systemd-nspawn,
# a private network: the broker's default ports are free there) and runs the
# unit as systemd does: Type=notify start, reload, the watchdog, stop. The
# results, written inside by the lavinmq-boot-check service, go to $3.
boot_inner() {
    local S="$1" DEB="$2" OUT="$3"
    scratch_root "$S" "$DEB"
    dpkg_in_root -i /tmp/lavinmq.deb
    umount -R "$R/dev" "$R/proc" "$R/run" "$R/tmp"
    # Its own machine id, or nspawn refuses to share the journal directory.
    systemd-id128 new >"$R/etc/machine-id"
    # For the check only: fail the start within 30 s instead of 300, and a
    # 3 s watchdog, which the check outlasts.
    mkdir -p "$R/etc/systemd/system/lavinmq.service.d"
    printf '[Service]\nTimeoutStartSec=30\nWatchdogSec=3\n' \
        >"$R/etc/systemd/system/lavinmq.service.d/check.conf"
    # The boot target: lavinmq, then the check, nothing else of this machine's
    # services.
    printf '[Unit]\nWants=lavinmq.service lavinmq-boot-check.service\n' \
        >"$R/etc/systemd/system/lavinmq-check.target"
    printf '[Service]\nType=oneshot\nExecStart=/usr/local/sbin/lavinmq-boot-check\n[Unit]\nAfter=lavinmq.service\n' \
        >"$R/etc/systemd/system/lavinmq-boot-check.service"
    cat >"$R/usr/local/sbin/lavinmq-boot-check" <<'CHECK'
#!/bin/bash
# Inside the booted scratch root: prints "ok: ..." or "FAIL: ..." lines to
# /root/boot-result, then powers the container off.
exec >/root/boot-result 2>&1
show() { systemctl show lavinmq.service -p "$1" --value; }
check() { # check DESCRIPTION COMMAND...
    if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1 ($(show ActiveState)/$(show SubState), result $(show Result))"; fi
}
running() { [ "$(show ActiveState)/$(show SubState)" = active/running ]; }
export LAVINMQCTL_CONTROL_UNIX_PATH=/run/lavinmq/lavinmqctl.sock
check "started: READY=1 received" running
pid=$(show MainPID)
check "lavinmqctl status through /run/lavinmq/lavinmqctl.sock" sh -c 'lavinmqctl status >/dev/null'
check "runs as lavinmq" test "$(stat -c %U /proc/"$pid")" = lavinmq
check "systemctl reload" systemctl reload lavinmq.service
sleep 1
check "running after reload, same process" sh -c "[ \"\$(systemctl show lavinmq.service -p SubState --value)\" = running ] && [ \"\$(systemctl show lavinmq.service -p MainPID --value)\" = $pid ]"
# WatchdogSec=3: without WATCHDOG=1 pings systemd would have killed it.
sleep 5
check "watchdog pinged: not restarted after 5 s" sh -c "[ \"\$(systemctl show lavinmq.service -p NRestarts --value)\" = 0 ] && [ \"\$(systemctl show lavinmq.service -p MainPID --value)\" = $pid ]"
check "systemctl stop" systemctl stop lavinmq.service
check "clean exit on stop" test "$(show Result)/$(show ExecMainStatus)" = success/0
check "runtime directory removed" test ! -e /run/lavinmq
echo "--- journal"
journalctl -u lavinmq.service -o cat --no-pager
echo "--- end"
systemctl start --no-block poweroff.target
CHECK
    chmod 755 "$R/usr/local/sbin/lavinmq-boot-check"
    local rc=0
    timeout 120 systemd-nspawn --quiet --directory="$R" --private-network --register=no \
        --keep-unit --boot -- systemd.unit=lavinmq-check.target >"$S/console" 2>&1 || rc=$?
    if [ -f "$S/upper/root/boot-result" ]; then
        cp "$S/upper/root/boot-result" "$OUT"
    else
        echo "systemd-nspawn (status $rc) ran no check:" >&2
        tail -n 20 "$S/console" >&2
        exit 77
    fi
}

# The RPM's scriptlets, extracted to $3 (pre, post, preun, postun), in a
# scratch root as rpm runs them ($1 of each: install 1, upgrade 2/1, erase 0),
# with the unit put where the payload puts it: the lavinmq user, group and
# data dir as the .deb's postinst makes them, the unit enabled, and erase
# disabling it but keeping the data.
rpm_inner() {
    local S="$1" DEB="$2" SCRIPTS="$3"
    scratch_root "$S" "$DEB"
    local unit=/usr/lib/systemd/system/lavinmq.service
    local wants=/etc/systemd/system/multi-user.target.wants/lavinmq.service
    cp "$SCRIPTS"/pre "$SCRIPTS"/post "$SCRIPTS"/preun "$SCRIPTS"/postun "$R/tmp/"
    scriptlet() { # scriptlet NAME ARG
        local out
        out=$(in_root sh "/tmp/$1" "$2" 2>&1) || fail "the RPM's %$1 $2 failed: $out"
    }
    # --- install ---
    scriptlet pre 1
    cp "$ROOT/extras/lavinmq.service" "$R$unit"
    scriptlet post 1
    local pw uid
    pw=$(in_root getent passwd lavinmq) || fail "the RPM's %pre created no lavinmq user"
    uid=$(cut -d: -f3 <<<"$pw")
    [ "$uid" -lt 1000 ] || fail "the RPM's lavinmq is not a system user (uid $uid)"
    expect "the RPM's lavinmq home" "$(cut -d: -f6 <<<"$pw")" /var/lib/lavinmq
    expect "the RPM's lavinmq shell" "$(cut -d: -f7 <<<"$pw")" /usr/sbin/nologin
    expect "the RPM's lavinmq group" "$(in_root id -gn lavinmq)" lavinmq
    expect "the RPM's data dir owner and mode" "$(in_root stat -c '%U:%G %a' /var/lib/lavinmq)" "lavinmq:lavinmq 750"
    [ -L "$R$wants" ] || fail "the RPM's %post did not enable the unit ($wants missing)"
    # --- upgrade: the new package's %pre and %post, the old one's %preun and %postun ---
    scriptlet pre 2
    scriptlet post 2
    scriptlet preun 1
    scriptlet postun 1
    expect "lavinmq's uid after an RPM upgrade" "$(in_root id -u lavinmq)" "$uid"
    [ -L "$R$wants" ] || fail "the unit is no longer enabled after an RPM upgrade"
    # --- erase ---
    scriptlet preun 0
    rm "$R$unit"
    scriptlet postun 0
    if [ -e "$R$wants" ] || [ -L "$R$wants" ]; then fail "the RPM's %preun left the unit enabled"; fi
    [ -d "$R/var/lib/lavinmq" ] || fail "the RPM's scriptlets deleted the data dir on erase"
}

case "${1:-}" in
__rpm)
    shift
    rpm_inner "$@"
    exit 0
    ;;
__sandbox)
    shift
    sandbox_inner "$@"
    exit 0
    ;;
__boot)
    shift
    boot_inner "$@"
    exit 0
    ;;
esac

# ---------------------------------------------------------------------------
cd "$ROOT"
START=$SECONDS

# cargo, strip and cargo-deb (and apt_install)
. "$ROOT/scripts/setup-package-deps.sh"
# systemd-analyze; deb-systemd-helper (the maintainer scripts enable the unit
# with it); adduser (a dependency of the package); unshare/setpriv
# (util-linux); readelf (binutils)
command -v systemd-analyze >/dev/null 2>&1 || apt_install systemd
command -v deb-systemd-helper >/dev/null 2>&1 || apt_install init-system-helpers
command -v adduser >/dev/null 2>&1 || apt_install adduser
command -v setpriv >/dev/null 2>&1 || apt_install util-linux
command -v readelf >/dev/null 2>&1 || apt_install binutils

TMP=$(mktemp -d)
cleanup() {
    if [ -n "${BROKER_PID:-}" ]; then kill -KILL "$BROKER_PID" 2>/dev/null || true; fi
    rm -rf "$TMP"
}
trap cleanup EXIT

# --- 1. build ---------------------------------------------------------------
if [ -n "${PACKAGE_DEB:-}" ]; then
    DEB=$PACKAGE_DEB
    say "checking $DEB (PACKAGE_DEB)"
else
    # The release binaries the tests just ran, when they are newer than every
    # build input: cargo-deb's own build of the binaries alone would compile
    # the dependencies again (without the dev-dependencies' features that
    # `cargo build --all-targets` unified in), minutes for nothing.
    flags=""
    if release_bins_fresh lavinmq lavinmqctl lavinmqperf; then
        flags=--no-build
        say "make deb CARGO_DEB_FLAGS=--no-build (target/release is up to date)"
    else
        say "make deb (target/release is missing or older than the sources: cargo-deb builds)"
    fi
    make_out=$(make --no-print-directory deb CARGO_DEB_FLAGS="$flags") || fail "make deb"
    echo "$make_out"
    DEB=$(grep '\.deb$' <<<"$make_out" | tail -n 1)
fi
[ -f "$DEB" ] || fail "no package at '$DEB'"
say "package: $DEB ($(du -h "$DEB" | cut -f1))"

# --- 2. files -----------------------------------------------------------------
listing=$(dpkg-deb -c "$DEB")
for f in ./usr/bin/lavinmq ./usr/bin/lavinmqctl ./usr/bin/lavinmqperf \
    ./etc/lavinmq/lavinmq.ini ./usr/share/doc/lavinmq/copyright \
    ./usr/lib/systemd/system/lavinmq.service; do
    line=$(awk -v f="$f" '$6 == f' <<<"$listing")
    [ -n "$line" ] || fail "$f is not in the package"
    case "$f" in
    ./usr/bin/*) mode=-rwxr-xr-x ;;
    *) mode=-rw-r--r-- ;;
    esac
    grep -qE "^$mode (root/root|0/0) " <<<"$line" || fail "$f: $line (expected $mode, owned by root)"
done
X="$TMP/extract"
dpkg-deb -x "$DEB" "$X"
cmp -s "$X/usr/lib/systemd/system/lavinmq.service" extras/lavinmq.service ||
    fail "the packaged unit differs from extras/lavinmq.service"
cmp -s "$X/etc/lavinmq/lavinmq.ini" extras/lavinmq.ini ||
    fail "the packaged conffile differs from extras/lavinmq.ini"
for b in lavinmq lavinmqctl lavinmqperf; do
    sections=$(readelf -S "$X/usr/bin/$b")
    if grep -q '\.debug_info' <<<"$sections"; then fail "/usr/bin/$b is not stripped"; fi
    "$X/usr/bin/$b" --version >/dev/null || fail "/usr/bin/$b --version"
done
# The unit waits for READY=1 (Type=notify) and WATCHDOG=1 pings: a broker
# that sends neither would be killed at start, after TimeoutStartSec.
if grep -q '^Type=notify' extras/lavinmq.service && ! grep -qa 'READY=1' "$X/usr/bin/lavinmq"; then
    fail "the unit is Type=notify, but lavinmq never sends READY=1"
fi
if grep -qE '^WatchdogSec=[1-9]' extras/lavinmq.service && ! grep -qa 'WATCHDOG=1' "$X/usr/bin/lavinmq"; then
    fail "the unit sets WatchdogSec, but lavinmq never sends WATCHDOG=1"
fi
say "files: binaries (stripped, run), unit and conffile as in extras/, copyright"

# --- 3. control data ------------------------------------------------------------
[ "$(dpkg-deb -f "$DEB" Package)" = lavinmq ] || fail "Package: is not lavinmq"
depends=$(dpkg-deb -f "$DEB" Depends)
[[ ", $depends," == *", adduser,"* || ", $depends," == *", adduser "* ]] || fail "Depends lacks adduser: $depends"
[[ "$depends" == *libc6* ]] || fail "Depends lacks libc6 (\$auto): $depends"
[ "$(dpkg-deb -I "$DEB" conffiles)" = /etc/lavinmq/lavinmq.ini ] ||
    fail "conffiles is not exactly /etc/lavinmq/lavinmq.ini: $(dpkg-deb -I "$DEB" conffiles)"
if [[ "$(dpkg-deb -f "$DEB" Description)" == "[generated"* ]]; then
    say "warning: the package's short description is a placeholder; set description in Cargo.toml's [package]"
fi
C="$TMP/control"
dpkg-deb -e "$DEB" "$C"
for s in postinst prerm postrm; do
    [ -x "$C/$s" ] || fail "no executable $s in the package"
    sh -n "$C/$s" || fail "$s: shell syntax error"
    if grep -q '#DEBHELPER#' "$C/$s"; then fail "$s still has the #DEBHELPER# token"; fi
done
grep -q 'deb-systemd-helper enable lavinmq.service' "$C/postinst" || fail "postinst does not enable lavinmq.service"
grep -q 'deb-systemd-invoke $_dh_action lavinmq.service' "$C/postinst" || fail "postinst does not start lavinmq.service"
grep -q 'deb-systemd-invoke stop lavinmq.service' "$C/prerm" || fail "prerm does not stop lavinmq.service"
grep -q 'deb-systemd-helper purge lavinmq.service' "$C/postrm" || fail "postrm does not purge lavinmq.service"
grep -q 'adduser --system' "$C/postinst" || fail "postinst does not create the lavinmq user"
say "control: Depends: $depends; conffiles; maintainer scripts with the systemd snippets"

# --- 4. the RPM package ------------------------------------------------------------
# Made by `make rpm` from the binaries the .deb was made of, with a gzip
# payload: 2 s instead of zstd's 18 (the payload's compression changes nothing
# checked here).
if [ -n "${PACKAGE_DEB:-}" ]; then
    skip "the RPM package: target/release need not hold the binaries of $DEB (PACKAGE_DEB)"
else
    rpm_start=$SECONDS
    rm -f target/generate-rpm/*.rpm
    make --no-print-directory rpm RPM_NO_BUILD=1 CARGO_GENERATE_RPM_FLAGS="--payload-compress gzip" >"$TMP/make-rpm.log" 2>&1 || {
        cat "$TMP/make-rpm.log" >&2
        fail "make rpm"
    }
    rpms=(target/generate-rpm/*.rpm)
    RPM=${rpms[0]}
    if [ "${#rpms[@]}" != 1 ] || [ ! -f "$RPM" ]; then fail "make rpm made no package in target/generate-rpm/"; fi
    expect "the RPM's name and version" "$(rpm -qp --queryformat '%{NAME} %{VERSION}-%{RELEASE}' "$RPM")" \
        "lavinmq $(dpkg-deb -f "$DEB" Version)"
    # The .deb's files, owners and modes (its copyright file is the RPM's
    # license file), as `rpm -qlp` with modes and owners lists the RPM's:
    # `-rwxr-xr-x root/root /usr/bin/lavinmq`.
    deb_files=$(awk '$1 ~ /^-/ { sub(/^\./, "", $6); print $1, ($2 == "0/0" ? "root/root" : $2), $6 }' <<<"$listing" |
        sed 's#/usr/share/doc/lavinmq/copyright$#/usr/share/licenses/lavinmq/LICENSE#' | sort -k3)
    rpm_files=$(rpm -qp --queryformat '[%{FILEMODES:perms} %{FILEUSERNAME}/%{FILEGROUPNAME} %{FILENAMES}\n]' "$RPM" | sort -k3)
    if [ "$rpm_files" != "$deb_files" ]; then
        diff <(echo "$deb_files") <(echo "$rpm_files") | grep '^[<>]' | sed 's/^</  .deb only:/; s/^>/  .rpm only:/' >&2
        fail "the RPM's files differ from the .deb's (above)"
    fi
    # Contents, by the SHA-256 digests `rpm --dump` lists: the binaries are the
    # stripped copies `make rpm` made, the rest are the sources' files.
    declare -A rpm_digest=()
    while read -r path _ _ digest _; do rpm_digest[$path]=$digest; done < <(rpm -qp --dump "$RPM")
    sha() { sha256sum "$1" | cut -d' ' -f1; }
    for b in lavinmq lavinmqctl lavinmqperf; do
        expect "/usr/bin/$b in the RPM" "${rpm_digest[/usr/bin/$b]}" "$(sha "target/generate-rpm/bin/$b")"
        if readelf -S "target/generate-rpm/bin/$b" | grep -q '\.debug_info'; then fail "the RPM's /usr/bin/$b is not stripped"; fi
        "target/generate-rpm/bin/$b" --version >/dev/null || fail "the RPM's /usr/bin/$b --version"
    done
    for f in /usr/lib/systemd/system/lavinmq.service:extras/lavinmq.service /etc/lavinmq/lavinmq.ini:extras/lavinmq.ini \
        /usr/share/doc/lavinmq/README.md:README.md /usr/share/licenses/lavinmq/LICENSE:LICENSE; do
        expect "${f%%:*} in the RPM" "${rpm_digest[${f%%:*}]}" "$(sha "${f#*:}")"
    done
    # The config file, like the .deb's conffile: kept when changed (noreplace).
    expect "the RPM's config files" "$(rpm -qp --queryformat '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$RPM" | grep '^[a-z]*c')" \
        "cn /etc/lavinmq/lavinmq.ini"
    requires=$(rpm -qpR "$RPM")
    for r in /usr/sbin/useradd /usr/sbin/groupadd 'libc.so.6()(64bit)'; do
        grep -qxF "$r" <<<"$requires" || fail "the RPM does not require $r: $(paste -sd ' ' <<<"$requires")"
    done
    # The scriptlets (run by /bin/sh, rpm's default): the ones in extras/rpm/,
    # and what they do.
    mkdir "$TMP/rpm"
    for s in pre:PREIN post:POSTIN preun:PREUN postun:POSTUN; do
        rpm -qp --queryformat "%{${s#*:}}" "$RPM" >"$TMP/rpm/${s%%:*}"
        cmp -s "$TMP/rpm/${s%%:*}" "extras/rpm/${s%%:*}" || fail "the RPM's %${s%%:*} is not extras/rpm/${s%%:*}"
        sh -n "$TMP/rpm/${s%%:*}" || fail "the RPM's %${s%%:*}: shell syntax error"
    done
    rpm_run=""
    if [ "$(id -u)" != 0 ]; then
        rpm_run="; scriptlets not run (needs root)"
    else
        mkdir "$TMP/rpm-root"
        rc=0
        unshare --mount --pid --fork --kill-child "$BASH" "$SELF" __rpm "$TMP/rpm-root" "$(realpath "$DEB")" "$TMP/rpm" || rc=$?
        if [ "$rc" = 77 ]; then
            rpm_run="; scriptlets not run (no overlay scratch root here)"
        elif [ "$rc" != 0 ]; then
            fail "the RPM's scriptlets in a scratch root (status $rc)"
        else
            rpm_run="; scriptlets run: user, data dir, unit enabled and disabled as the .deb does"
        fi
    fi
    say "RPM: $RPM ($(du -h "$RPM" | cut -f1)): the .deb's files, modes and contents; config noreplace; Requires$rpm_run ($((SECONDS - rpm_start)) s)"
fi

# --- 5. install and purge in a scratch root -----------------------------------------
sandbox_skip=""
if [ "$(id -u)" != 0 ]; then
    sandbox_skip="needs root (mount namespace, overlayfs, chroot)"
elif [ "$(dpkg-query -W -f='${db:Status-Status}' lavinmq 2>/dev/null || true)" = installed ]; then
    sandbox_skip="lavinmq is installed on this machine; the scratch root (an overlay of it) would upgrade it"
else
    # The overlay covers the root file system only: the directories dpkg
    # touches must be on it.
    for d in /etc /usr /var /var/lib/dpkg; do
        if [ "$(stat -c %d "$d")" != "$(stat -c %d /)" ]; then
            sandbox_skip="$d is a separate file system, which the overlay of / would not cover"
        fi
    done
fi
host_state() { # what must not change on this machine
    cat /etc/passwd /etc/group /var/lib/dpkg/status | md5sum
    ls -d /var/lib/lavinmq /usr/bin/lavinmq /etc/lavinmq 2>/dev/null || true
}
if [ -z "$sandbox_skip" ]; then
    before=$(host_state)
    mkdir "$TMP/sandbox"
    rc=0
    unshare --mount --pid --fork --kill-child "$BASH" "$SELF" __sandbox "$TMP/sandbox" "$(realpath "$DEB")" || rc=$?
    if [ "$rc" = 77 ]; then
        sandbox_skip="cannot set up the overlay scratch root here (see above)"
    elif [ "$rc" != 0 ]; then
        fail "install/purge in the scratch root (status $rc)"
    fi
    [ "$(host_state)" = "$before" ] || fail "the scratch-root install changed this machine's accounts, dpkg status or files"
fi
# The same scratch root booted with systemd: the unit as systemd runs it.
boot_skip=""
if [ "${CHECK_PACKAGE_BOOT:-1}" = 0 ]; then
    boot_skip="CHECK_PACKAGE_BOOT=0"
elif [ -n "$sandbox_skip" ]; then
    boot_skip=$sandbox_skip
else
    command -v systemd-nspawn >/dev/null 2>&1 || apt_install systemd-container
    before=$(host_state)
    mkdir "$TMP/boot"
    rc=0
    unshare --mount "$BASH" "$SELF" __boot "$TMP/boot" "$(realpath "$DEB")" "$TMP/boot-result" || rc=$?
    [ "$(host_state)" = "$before" ] || fail "the boot test changed this machine's accounts, dpkg status or files"
    if [ "$rc" = 77 ]; then
        boot_skip="cannot boot systemd in a container here (see above)"
    elif [ "$rc" != 0 ]; then
        fail "the boot test (status $rc)"
    elif grep -q '^FAIL' "$TMP/boot-result"; then
        cat "$TMP/boot-result" >&2
        fail "the unit under systemd (above)"
    else
        say "under systemd: $(sed -n 's/^ok: //p' "$TMP/boot-result" | paste -sd ';' | sed 's/;/; /g')"
    fi
fi
[ -z "$boot_skip" ] || skip "the unit under systemd (nspawn boot): $boot_skip"

if [ -n "$sandbox_skip" ]; then
    skip "install/purge in a scratch root: $sandbox_skip"
    # Still verify the unit, against the extracted binary.
    sed "s#^ExecStart=/usr/bin/lavinmq#ExecStart=$X/usr/bin/lavinmq#" extras/lavinmq.service >"$TMP/lavinmq.service"
    rc=0
    verify=$(systemd-analyze verify "$TMP/lavinmq.service" 2>&1) || rc=$?
    if [ "$rc" != 0 ] || grep -q 'lavinmq' <<<"$verify"; then
        echo "$verify" >&2
        fail "systemd-analyze verify extras/lavinmq.service (status $rc)"
    fi
    say "systemd-analyze verify extras/lavinmq.service: ok"
fi

# --- 6. Dockerfile and the image's configuration ------------------------------------
# The Dockerfile with continuation lines joined, comments dropped: one
# instruction per line.
df=$(sed -e '/^[[:space:]]*#/d' Dockerfile | sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta')
# The final (runtime) stage: from the last FROM on.
final=$(awk 'toupper($1) == "FROM" { buf = "" } { buf = buf $0 "\n" } END { printf "%s", buf }' <<<"$df")
instr() { grep -iE "^[[:space:]]*$1([[:space:]]|$)" <<<"$df" || true; }
final_instr() { grep -iE "^[[:space:]]*$1([[:space:]]|$)" <<<"$final" || true; }
froms=$(instr FROM)
[ "$(wc -l <<<"$froms")" -ge 2 ] || fail "Dockerfile: not multi-stage (one FROM)"
# The build stage: the official Rust image, a pinned release on the runtime
# stage's Debian (the binaries need its glibc, not a newer one).
grep -qiE '^FROM[[:space:]]+rust:[0-9]+\.[0-9]+\.[0-9]+-bookworm[[:space:]]+AS[[:space:]]+[a-z]' <<<"$(head -n 1 <<<"$froms")" ||
    fail "Dockerfile: the first stage is not 'FROM rust:<x.y.z>-bookworm AS <name>'"
grep -qiE '^FROM[[:space:]]+debian:bookworm-slim([[:space:]]|$)' <<<"$(tail -n 1 <<<"$froms")" ||
    fail "Dockerfile: the final stage is not FROM debian:bookworm-slim"
grep -q 'COPY --from=' <<<"$df" || fail "Dockerfile: the runtime stage copies nothing from the build stage"
grep -q 'protobuf-compiler' <<<"$df" || fail "Dockerfile: the build stage lacks protobuf-compiler (protoc)"
grep -q 'cargo build --release' <<<"$df" || fail "Dockerfile: no cargo build --release"
while IFS= read -r l; do
    [ -z "$l" ] && continue
    [[ "$l" == *--no-install-recommends* && "$l" == *"rm -rf /var/lib/apt/lists"* ]] ||
        fail "Dockerfile: apt-get install without --no-install-recommends and list cleanup: $l"
done <<<"$(grep 'apt-get install' <<<"$df" || true)"
user=$(final_instr USER | tail -n 1 | awk '{print $2}')
[ -n "$user" ] || fail "Dockerfile: no USER in the final stage (the broker would run as root)"
case "${user%%:*}" in root | 0) fail "Dockerfile: USER $user is root" ;; esac
final_instr VOLUME | grep -qE '^VOLUME[[:space:]]+(\[[[:space:]]*)?"?/var/lib/lavinmq/?"?' || fail "Dockerfile: no VOLUME /var/lib/lavinmq"
exposed=" $(final_instr EXPOSE | sed -E 's/^[[:space:]]*EXPOSE//I' | tr '\n' ' ') "
for port in $IMAGE_PORTS; do
    [[ "$exposed" == *" $port "* || "$exposed" == *" $port/tcp "* ]] || fail "Dockerfile: port $port not EXPOSEd"
done
health=$(final_instr HEALTHCHECK)
grep -qE 'CMD.*lavinmqctl.*status' <<<"$health" || fail "Dockerfile: no HEALTHCHECK running lavinmqctl status"
final_instr ENTRYPOINT | grep -q '/usr/local/bin/lavinmq-entrypoint"' || fail "Dockerfile: the ENTRYPOINT is not the entry script"
grep -q '^exec /usr/bin/lavinmq "\$@"$' "$ROOT/extras/docker/entrypoint.sh" || fail "extras/docker/entrypoint.sh does not exec the broker"
# Every variable the image and the unit set is one the binaries read.
for v in $(grep -ohE '\bLAVINMQ(CTL)?_[A-Z_]+=' Dockerfile extras/lavinmq.service | tr -d = | sort -u); do
    grep -rqF "\"$v\"" src/config src/bin || fail "$v (Dockerfile or unit) is read by no binary"
done
# .dockerignore keeps target/ and .git out of the context and lets every
# COPY source in.
[ -f .dockerignore ] || fail "no .dockerignore"
ignore=$(grep -vE '^[[:space:]]*(#|$)' .dockerignore)
[ "$(head -n 1 <<<"$ignore")" = '*' ] || grep -qxE '/?target/?' <<<"$ignore" || fail ".dockerignore does not exclude target/"
for src in $(grep -E '^COPY ' <<<"$df" | grep -v -- '--from=' | awk '{for (i = 2; i < NF; i++) print $i}'); do
    [ -e "$src" ] || fail "Dockerfile: COPY $src, which does not exist"
done
if [ "$(head -n 1 <<<"$ignore")" = '*' ]; then
    # An allowlist: each COPY source must be let back in by a '!' line naming
    # it or a directory above it.
    for src in $(grep -E '^COPY ' <<<"$df" | grep -v -- '--from=' | awk '{for (i = 2; i < NF; i++) print $i}'); do
        src=${src%/}
        allowed=""
        while IFS= read -r pat; do
            pat=${pat#!}
            pat=${pat%/}
            if [ "$src" = "$pat" ] || [[ "$src" == "$pat/"* ]]; then allowed=1; fi
        done < <(grep '^!' <<<"$ignore")
        [ -n "$allowed" ] || fail ".dockerignore keeps out $src, which the Dockerfile copies"
    done
fi
say "Dockerfile: multi-stage, USER $user, VOLUME, HEALTHCHECK, EXPOSE $IMAGE_PORTS; .dockerignore"

# The image's configuration, without a container: the packaged broker with the
# image's ini file and ENV lines (paths moved to a temporary directory, ports
# 0), and the HEALTHCHECK command against it.
ini=$(grep -E '^COPY .*/etc/lavinmq/lavinmq\.ini$' <<<"$df" | awk '{print $2}')
[ -f "$ini" ] || fail "Dockerfile: no config file copied to /etc/lavinmq/lavinmq.ini"
image_env=()
while IFS= read -r l; do
    image_env+=("$(sed -E 's/^ENV[[:space:]]+//' <<<"$l")")
done < <(grep -E '^ENV LAVINMQ' <<<"$df")
SOCK="$TMP/image/run/lavinmqctl.sock"
CTL="$X/usr/bin/lavinmqctl"
LOG="$TMP/image.log"
start_broker_and_wait env "${image_env[@]}" LAVINMQ_DATADIR="$TMP/image/data" \
    LAVINMQ_CONTROL_UNIX_PATH="$SOCK" "$X/usr/bin/lavinmq" -c "$ini" \
    -p 0 --mqtt-port 0 --stream-port 0 --http-port 0 --metrics-http-port 0
for listener in AMQP MQTT 'HTTP API' Metrics; do
    grep -qE "$listener listening on (\[::\]|0\.0\.0\.0):" "$LOG" ||
        fail "with the image's config, $listener does not listen on all interfaces: $(cat "$LOG")"
done
# The HEALTHCHECK's exec form, e.g. CMD ["lavinmqctl", "status"], run with the
# image's ENV (its LAVINMQCTL_CONTROL_UNIX_PATH moved like the broker's).
read -r -a health_cmd <<<"$(sed -E 's/.*CMD[[:space:]]*\[(.*)\].*/\1/; s/[",]/ /g' <<<"$health")"
[ "${health_cmd[0]}" = lavinmqctl ] || fail "HEALTHCHECK does not run lavinmqctl: $health"
health_run() {
    env "${image_env[@]}" LAVINMQCTL_CONTROL_UNIX_PATH="$SOCK" "$CTL" "${health_cmd[@]:1}" >/dev/null 2>&1
}
health_run || fail "the HEALTHCHECK command fails against a running broker"
stop_broker
if health_run; then fail "the HEALTHCHECK command succeeds with the broker stopped"; fi
BROKER_PID=""
say "image config: every listener on all interfaces; HEALTHCHECK passes while up, fails when down"

# --- 7. the image itself, where a container engine runs --------------------------------
engine=""
why=""
for e in podman docker; do
    if ! command -v "$e" >/dev/null 2>&1; then
        why+="$e not installed; "
    elif ! "$e" info >/dev/null 2>&1; then
        why+="$e cannot reach its daemon or runtime; "
    else
        engine=$e
        break
    fi
done
if [ "${CHECK_PACKAGE_IMAGE:-1}" = 0 ]; then
    skip "image build (CHECK_PACKAGE_IMAGE=0)"
elif [ -z "$engine" ]; then
    skip "no container engine (${why%; })"
else
    tag="lavinmq-check:$$"
    say "$engine build -t $tag . (compiles everything in the container)"
    "$engine" build -t "$tag" . || fail "$engine build"
    cid=$("$engine" run -d "$tag")
    ok=""
    for _ in $(seq 1 60); do
        if "$engine" exec "$cid" lavinmqctl status >/dev/null 2>&1; then ok=1 && break; fi
        sleep 1
    done
    ctr_uid=$("$engine" exec "$cid" id -u || echo "?")
    "$engine" stop -t 60 "$cid" >/dev/null
    code=$("$engine" inspect -f '{{.State.ExitCode}}' "$cid")
    logs=$("$engine" logs "$cid" 2>&1 || true)
    "$engine" rm "$cid" >/dev/null
    "$engine" rmi "$tag" >/dev/null || true
    [ -n "$ok" ] || fail "the container never answered lavinmqctl status: $logs"
    [ "$ctr_uid" != 0 ] || fail "the container runs as root"
    [ "$code" = 0 ] || fail "the container exited with $code on stop: $logs"
    say "image: built, answered lavinmqctl status as uid $ctr_uid, stopped cleanly"
fi

say "all checks passed ($((SECONDS - START)) s)"
