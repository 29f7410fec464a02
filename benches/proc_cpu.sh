# shellcheck shell=bash
# Sourced by the benchmark scripts: a process's CPU time from /proc.
#   CLK_TCK         clock ticks per second
#   cpu_ticks PID   user + system time PID has used, in clock ticks (0 when gone)
# shellcheck disable=SC2034 # used by the scripts that source this
CLK_TCK=$(getconf CLK_TCK)

# utime and stime are fields 14 and 15 of /proc/PID/stat; the command name
# before them may hold spaces, so they are counted from after its `) `.
cpu_ticks() {
    local t
    t=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $12 + $13}' || true)
    echo "${t:-0}"
}
