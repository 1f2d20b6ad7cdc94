#!/usr/bin/env bash
# Runs a command with a time limit, for CI: a command still running after SECONDS is ended, and
# first the threads of every test process it runs are printed (with gdb, grouped by stack, the
# most common first), so that a hang fails with what it was waiting for instead of using up the
# job's time in silence.
#
#   scripts/watchdog.sh SECONDS COMMAND [ARGUMENT...]
#
# Exits with the command's status, or 124 when the limit ended it.
set -uo pipefail

[ $# -ge 2 ] || { echo "usage: scripts/watchdog.sh SECONDS COMMAND [ARGUMENT...]" >&2; exit 2; }
limit=$1
shift

# Every process the command starts is in a process group of its own, to be ended together.
set -m
"$@" &
command_pid=$!
set +m
marker=$(mktemp)
(
    for _ in $(seq "$limit"); do
        sleep 1
        kill -0 "$command_pid" 2>/dev/null || exit 0
    done
    echo "watchdog: still running after ${limit} s: $*" >&2
    echo 1 > "$marker"
    # (swift test runs the test process in a process group of its own: it is ended by its id.)
    tests=$(pgrep -f '/CourierPackageTests.xctest' || true)
    for pid in $tests; do
        echo "watchdog: threads of process $pid, grouped by their top frames:" >&2
        if command -v gdb >/dev/null 2>&1; then
            timeout 120 gdb -p "$pid" -batch -ex "set pagination off" -ex "thread apply all bt 12" 2>/dev/null | python3 -c '
import re, sys, collections
threads = re.split(r"\n(?=Thread \d+ )", sys.stdin.read())
stacks = collections.Counter()
for thread in threads:
    if not thread.startswith("Thread"):
        continue
    frames = re.findall(r"#\d+\s+(?:0x[0-9a-f]+ in )?(\S+)", thread)
    stacks[tuple(frame[:110] for frame in frames[:10])] += 1
for stack, count in stacks.most_common(12):
    print(f"  {count} thread(s):")
    for frame in stack:
        print(f"      {frame}")
' >&2
        else
            echo "  (gdb is not installed)" >&2
        fi
    done
    for pid in $tests; do kill -TERM -- "-$pid" "$pid" 2>/dev/null; done
    kill -TERM -- "-$command_pid" 2>/dev/null
    sleep 5
    for pid in $tests; do kill -KILL -- "-$pid" "$pid" 2>/dev/null; done
    kill -KILL -- "-$command_pid" 2>/dev/null
) &
watchdog_pid=$!
wait "$command_pid"
status=$?
kill "$watchdog_pid" 2>/dev/null
wait "$watchdog_pid" 2>/dev/null
if [ -s "$marker" ]; then
    rm -f "$marker"
    exit 124
fi
rm -f "$marker"
exit "$status"
