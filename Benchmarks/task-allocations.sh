#!/usr/bin/env bash
# Task-allocator use per request: every swift_task_alloc (async frames, and values whose size is
# known only at run time) of Courier's side of the pipeline benchmark, by calling function.
#
#   Benchmarks/task-allocations.sh [h1|h2] [CONCURRENCY]
#
# A uprobe on swift_task_alloc records the size asked for and the caller; two runs that differ
# only in their number of requests (200 and 1,200 after the same warm-up) give the per-request
# difference. Needs perf with uprobes (root) and python3; builds the release benchmarks first.
set -euo pipefail
cd "$(dirname "$0")/.."
PROTOCOL=${1:-h1}
CONCURRENCY=${2:-8}
swift build -c release --product CourierBenchmarks --scratch-path .build-release 2>&1 | { grep -E "error|complete" || true; } | tail -3
library=$(ldd .build-release/release/CourierBenchmarks | awk '/libswift_Concurrency/ {print $3}')
[ -n "$library" ] || library=$(dirname "$(command -v swift)")/../lib/swift/linux/libswift_Concurrency.so
out=$(mktemp -d)
trap 'perf probe -q -d "probe_libswift_Concurrency:swift_task_alloc" 2>/dev/null || true; rm -rf "$out"' EXIT
perf probe -q -d "probe_libswift_Concurrency:swift_task_alloc" 2>/dev/null || true
perf probe -q -x "$library" 'swift_task_alloc size=%di:u64'
for n in 200 1200; do
    perf record -q -o "$out/$n.data" -e probe_libswift_Concurrency:swift_task_alloc --call-graph=fp \
        .build-release/release/CourierBenchmarks count --side courier --protocol "$PROTOCOL" --concurrency "$CONCURRENCY" --requests "$n" > /dev/null
    perf script -i "$out/$n.data" -F trace,ip,sym > "$out/$n.txt" 2>/dev/null
done
python3 - "$out/200.txt" "$out/1200.txt" <<'PY'
import collections, re, subprocess, sys
def load(path):
    counts = collections.Counter()
    size, frames = None, 0
    for line in open(path, errors="replace"):
        match = re.search(r"size=(\d+)", line)
        if match:
            size, frames = int(match.group(1)), 0
            continue
        if not line.strip():
            size = None
            continue
        if size is not None:
            frames += 1
            if frames == 2:
                counts[(line.split(None, 1)[1].strip() if len(line.split(None, 1)) > 1 else "?", size)] += 1
    return counts
low, high = load(sys.argv[1]), load(sys.argv[2])
rows = [((high[key] - low.get(key, 0)) / 1000, key) for key in high]
rows = [(n, key) for n, key in rows if n >= 0.5]
names = subprocess.run(["swift", "demangle", "--simplified"], input="\n".join(key[0] for _, key in rows), capture_output=True, text=True).stdout.splitlines()
total = sum(n * key[1] for n, key in rows)
print(f"per request: {sum(n for n, _ in rows):.0f} task allocations, {total:,.0f} bytes")
print("  bytes  × per request  caller")
for (n, key), name in sorted(zip(rows, names), key=lambda row: -row[0][0] * row[0][1][1])[:40]:
    print(f"{key[1]:7d}  × {n:5.2f}  {name[:140]}")
PY
