# shellcheck shell=bash
# Sourced by the benchmark scripts: a process's CPU time and memory from /proc.
#   CLK_TCK         clock ticks per second
#   cpu_ticks PID   user + system time PID has used, in clock ticks (0 when gone)
#   rss_kb PID      PID's resident set in kB (0 when gone)
#   write_back_dirty  writes out what is dirty in the page cache (`sync`)
#   sampled_run PID CMD...  writes back dirty pages, then runs CMD (its output
#                   wherever the caller redirects it) while sampling PID, and
#                   sets RUN_RC (CMD's exit status),
#                   RUN_PEAK_KB (PID's peak RSS meanwhile, sampled every 0.5 s)
#                   and RUN_TICKS (the CPU ticks PID used meanwhile)
# shellcheck disable=SC2034 # used by the scripts that source this
CLK_TCK=$(getconf CLK_TCK)

# utime and stime are fields 14 and 15 of /proc/PID/stat; the command name
# before them may hold spaces, so they are counted from after its `) `.
cpu_ticks() {
    local t
    t=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $12 + $13}' || true)
    echo "${t:-0}"
}

rss_kb() {
    local kb
    kb=$(awk '/VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || true)
    echo "${kb:-0}"
}

# What earlier runs left dirty in the page cache (RabbitMQ does not sync its
# message store or its streams) is written out before the next run: a broker
# whose replies wait for a sync of the filesystem (our group commit's
# syncfs) would otherwise write it back for them. After the backlog
# scenarios, a durable bind+unbind pair took 60 ms instead of 1.
write_back_dirty() { sync; }

sampled_run() {
    local pid=$1 child r
    shift
    write_back_dirty
    RUN_RC=0
    RUN_PEAK_KB=0
    RUN_TICKS=$(cpu_ticks "$pid")
    "$@" &
    child=$!
    while kill -0 "$child" 2>/dev/null; do
        r=$(rss_kb "$pid")
        [ "$r" -gt "$RUN_PEAK_KB" ] && RUN_PEAK_KB=$r
        sleep 0.5
    done
    wait "$child" || RUN_RC=$?
    RUN_TICKS=$(($(cpu_ticks "$pid") - RUN_TICKS))
}
