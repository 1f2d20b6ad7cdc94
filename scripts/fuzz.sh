#!/usr/bin/env bash
# Fuzzes Courier's parsers of untrusted bytes with libFuzzer and AddressSanitizer.
#
#   scripts/fuzz.sh                 every target for 30 s each
#   FUZZ_SECONDS=300 scripts/fuzz.sh sse envelope
#
# Each target starts from its committed corpus (Fuzz/corpus/<target>/, left unchanged); new
# inputs go to a scratch directory. A crashing input is saved in Fuzz/crashes/<target>/ and the
# script exits non-zero: fix the parser, then add the input to Fuzz/corpus/<target>/, where the
# test suite replays it from then on.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-30}
swift build -c release --product CourierFuzz --scratch-path .build-fuzz \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -DCOURIER_FUZZING -Xswiftc -use-ld=lld 2>&1 | grep -vE "ld.gold: warning|^warning: 'swift-" || true
binary=.build-fuzz/release/CourierFuzz
[ -x "$binary" ] || { echo "fuzz: the build failed" >&2; exit 1; }

if [ $# -gt 0 ]; then targets=("$@"); else mapfile -t targets < <("$binary" list); fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=()
for target in "${targets[@]}"; do
    mkdir -p "$scratch/$target" "Fuzz/crashes/$target"
    echo "fuzz: $target for ${seconds}s"
    if ! "$binary" "$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="Fuzz/crashes/$target/" \
        "$scratch/$target" "Fuzz/corpus/$target" > "$scratch/$target.log" 2>&1; then
        failed+=("$target")
        tail -40 "$scratch/$target.log"
    else
        grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$scratch/$target.log" | tr '\n' ' '
        echo
    fi
    rmdir "Fuzz/crashes/$target" 2>/dev/null || true
done
rmdir Fuzz/crashes 2>/dev/null || true
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: findings in ${failed[*]} (inputs in Fuzz/crashes/)" >&2
    exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no finding"
