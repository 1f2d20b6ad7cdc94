#!/usr/bin/env bash
# Instructions per request, counted by callgrind: Courier against raw AsyncHTTPClient.
#
#   Benchmarks/profile.sh                       the table: h1 and h2 at concurrency 1, 8, 64
#   Benchmarks/profile.sh h1 8                  one point
#   MONITORS="none log telemetry all" Benchmarks/profile.sh h1 8
#                                               Courier with each set of event monitors
#   KEEP=1 Benchmarks/profile.sh h1 8           keep the callgrind files (callgrind_annotate)
#   TRANSPORT=1 Benchmarks/profile.sh h2 8      also Courier's transport alone (no pipeline), which
#                                               splits Courier's cost into transport and pipeline
#
# Each number is (count(N2) - count(N1)) / (N2 - N1) for two runs of `CourierBenchmarks count`
# that differ only in the number of requests, so start-up, TLS set-up and warm-up cancel out.
# Callgrind counts instructions, not time: the same binary and inputs give nearly the same
# count whatever else the machine does. The server runs in a child process, not counted
# (valgrind does not follow it). perf's counters are not available on this machine.
#
# Two things valgrind 3.19 needs here: a copy of the binary without debug information (its
# reader gives up on the DWARF that swiftc writes), and a small preloaded wrapper
# (valgrind-sigsuspend-shim.c) for the signal mask libdispatch's main thread suspends with.
# Needs valgrind and gcc.
set -euo pipefail
cd "$(dirname "$0")/.."

N1=${N1:-200}
N2=${N2:-1200}
MONITORS=${MONITORS:-none}
swift build -c release --product CourierBenchmarks --scratch-path .build-release 2>&1 | { grep -E "error|complete" || true; } | tail -3
[ -x .build-release/release/CourierBenchmarks ] || { echo "profile: the build failed" >&2; exit 1; }
out=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] && echo "callgrind files in $out" || rm -rf "$out"' EXIT
binary="$out/CourierBenchmarks"
cp .build-release/release/CourierBenchmarks "$binary"
strip --strip-debug "$binary"
gcc -shared -fPIC -O2 -o "$out/shim.so" Benchmarks/valgrind-sigsuspend-shim.c -ldl
# The server runs outside valgrind, started here (a program under valgrind cannot start one).
mkdir -p "$out/server"
"$binary" serve "$out/server" > "$out/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; [ -n "${KEEP:-}" ] && echo "callgrind files in $out" || rm -rf "$out"' EXIT
export COURIER_BENCH_SERVER_DIR="$out/server"

# count SIDE PROTOCOL CONCURRENCY MONITORS REQUESTS → instructions of the whole client process
count() {
    local file="$out/$1-$2-c$3-$4-n$5.cg"
    COURIER_BENCH_MONITORS=$4 LD_PRELOAD="$out/shim.so" valgrind --tool=callgrind --callgrind-out-file="$file" \
        "$binary" count --side "$1" --protocol "$2" --concurrency "$3" --requests "$5" > "$out/log" 2>&1 \
        || { cat "$out/log" >&2; exit 1; }
    grep -E "^==[0-9]+== Collected" "$out/log" | awk '{print $4}'
}

per_request() {
    local low high
    low=$(count "$@" "$N1")
    high=$(count "$@" "$N2")
    echo $(( (high - low) / (N2 - N1) ))
}

if [ $# -ge 2 ]; then points=("$1 $2"); else points=("h1 1" "h1 8" "h1 64" "h2 1" "h2 8" "h2 64"); fi
echo "instructions per request (callgrind; N = $N1 and $N2 after 200 warm-up requests)"
printf "%-8s %5s %12s" protocol conc raw
[ -n "${TRANSPORT:-}" ] && printf " %20s" "transport alone"
for monitors in $MONITORS; do printf " %20s" "courier ($monitors)"; done
printf "\n"
for point in "${points[@]}"; do
    set -- $point
    raw=$(per_request raw "$1" "$2" none)
    printf "%-8s %5s %12s" "$1" "$2" "$raw"
    if [ -n "${TRANSPORT:-}" ]; then
        transport=$(per_request transport "$1" "$2" none)
        printf " %11s (%5.1f%%)" "$transport" "$(awk -v a="$transport" -v b="$raw" 'BEGIN { printf "%.1f", a * 100 / b }')"
    fi
    for monitors in $MONITORS; do
        courier=$(per_request courier "$1" "$2" "$monitors")
        printf " %11s (%5.1f%%)" "$courier" "$(awk -v a="$courier" -v b="$raw" 'BEGIN { printf "%.1f", a * 100 / b }')"
    done
    printf "\n"
done
