# shellcheck shell=bash
# Sourced by the side-by-side benchmarks: finds LavinMQ 2.9.1, the reference
# broker and load generator they measure us against (built from its source, see
# ../shared/anchors/README.md; it is only run, nothing of it goes into the project).
#   LAVINMQ_ANCHOR_DIR  a directory holding LavinMQ 2.9.1's lavinmq and lavinmqperf
#                       ("none": leave LavinMQ 2.9.1 out). Default: the bin/ of
#                       ../shared/anchors/lavinmq-2.9.1-bin.tar.xz unpacked into the
#                       script's temp dir when that tarball is there, else /opt/lmq/bin.
# find_anchor WORKDIR  sets ANCHOR_LAVINMQ (its broker) and ANCHOR_PERF (its load
#                      generator), each empty when it is not there or does not run,
#                      and then says on stderr, in one line, what is skipped and why.
ANCHOR_TARBALL=../shared/anchors/lavinmq-2.9.1-bin.tar.xz
ANCHOR_PACKAGES="libgc1 liblz4-1 libpcre2-8-0 libssl3 zlib1g"

# anchor_bin DIR NAME: prints DIR/NAME when it runs (its --version works);
# else prints why not and fails.
anchor_bin() {
    local bin=$1/$2 out
    if [ ! -x "$bin" ]; then
        echo "no $bin"
        return 1
    fi
    if ! out=$("$bin" --version 2>&1); then
        echo "$bin does not run ($(echo "$out" | head -1); it needs the packages $ANCHOR_PACKAGES)"
        return 1
    fi
    case $out in
    *2.9.1*) ;;
    *) echo "warning: $bin is version $(echo "$out" | head -1), not 2.9.1; measuring it anyway" >&2 ;;
    esac
    echo "$bin"
}

find_anchor() {
    local work=$1 dir=${LAVINMQ_ANCHOR_DIR:-} from
    ANCHOR_LAVINMQ=
    ANCHOR_PERF=
    if [ "$dir" = none ]; then
        echo "LavinMQ 2.9.1 skipped (broker and load generator): LAVINMQ_ANCHOR_DIR=none" >&2
        return 0
    fi
    if [ -n "$dir" ]; then
        from="LAVINMQ_ANCHOR_DIR=$dir"
    elif [ -f "$ANCHOR_TARBALL" ] && mkdir -p "$work/anchor" &&
        tar -xJf "$ANCHOR_TARBALL" -C "$work/anchor" 2>"$work/anchor.err"; then
        dir=$work/anchor/bin
        from="$ANCHOR_TARBALL"
    elif [ -d /opt/lmq/bin ]; then
        [ -f "$ANCHOR_TARBALL" ] && echo "could not unpack $ANCHOR_TARBALL ($(head -1 "$work/anchor.err")); using /opt/lmq/bin" >&2
        dir=/opt/lmq/bin
        from=/opt/lmq/bin
    else
        echo "LavinMQ 2.9.1 skipped (broker and load generator): neither $ANCHOR_TARBALL nor /opt/lmq/bin is there (set LAVINMQ_ANCHOR_DIR)" >&2
        return 0
    fi
    local why_broker="" why_perf=""
    ANCHOR_LAVINMQ=$(anchor_bin "$dir" lavinmq) || { why_broker=$ANCHOR_LAVINMQ; ANCHOR_LAVINMQ=; }
    ANCHOR_PERF=$(anchor_bin "$dir" lavinmqperf) || { why_perf=$ANCHOR_PERF; ANCHOR_PERF=; }
    if [ -z "$ANCHOR_LAVINMQ" ] && [ -z "$ANCHOR_PERF" ]; then
        echo "LavinMQ 2.9.1 skipped (broker and load generator, from $from): $why_broker" >&2
    elif [ -z "$ANCHOR_LAVINMQ" ]; then
        echo "LavinMQ 2.9.1 broker skipped (from $from): $why_broker" >&2
    elif [ -z "$ANCHOR_PERF" ]; then
        echo "LavinMQ 2.9.1's load generator skipped (from $from): $why_perf" >&2
    else
        echo "LavinMQ 2.9.1 from $from" >&2
    fi
}
