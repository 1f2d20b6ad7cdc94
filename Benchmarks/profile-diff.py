#!/usr/bin/env python3
"""Where two callgrind profiles of Courier differ, function by function, per request.

    KEEP=1 Benchmarks/profile.sh h1 1                          # prints "callgrind files in A"
    KEEP=1 COURIER_BENCH_DEDUP=1 Benchmarks/profile.sh h1 1    # prints "callgrind files in B"
    Benchmarks/profile-diff.py A B [h1-c1]

Each function's exclusive (self) instructions per request are (count(N2) - count(N1)) / (N2 - N1)
of the Courier side, as profile.sh counts the whole process; the table lists the functions whose
count grew most from A to B, then those that shrank. Self counts add up, unlike the inclusive
counts of async functions, which take in everything awaited below them.

The Swift runtime's generic-metadata cache (`ConcurrentReadableHashMap::find`,
`MetadataCacheKey::operator==`) is probed tens of times a request, and what a probe costs changes
from one build to the next with no change to the code: the total "without the metadata cache"
leaves it out. Needs callgrind_annotate (valgrind); pipe through `swift demangle --simplified`
for readable names.
"""
import collections
import re
import subprocess
import sys

N1, N2 = 200, 1200
METADATA_CACHE = ("ConcurrentReadableHashMap", "MetadataCacheKey")


def self_counts(path):
    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", "--inclusive=no", path], capture_output=True, text=True, check=True
    ).stdout
    counts = collections.Counter()
    for line in text.splitlines():
        match = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(\S.*)", line)
        if match and ":" in match.group(2):
            counts[match.group(2).split(" [")[0]] += int(match.group(1).replace(",", ""))
    return counts


def per_request(directory, point):
    low = self_counts(f"{directory}/courier-{point}-none-n{N1}.cg")
    high = self_counts(f"{directory}/courier-{point}-none-n{N2}.cg")
    return {name: (high[name] - low[name]) / (N2 - N1) for name in set(low) | set(high)}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    point = sys.argv[3] if len(sys.argv) > 3 else "h1-c1"
    a, b = per_request(sys.argv[1], point), per_request(sys.argv[2], point)
    for label, counts in (("A", a), ("B", b)):
        total = sum(counts.values())
        cache = sum(v for k, v in counts.items() if any(m in k for m in METADATA_CACHE))
        print(f"{label}: {total:,.0f} instructions a request; {total - cache:,.0f} without the metadata cache")
    rows = sorted(((b.get(k, 0) - a.get(k, 0), k) for k in set(a) | set(b)), reverse=True)
    print(f"{'B - A':>9} {'B':>9} {'A':>9}  function")
    for delta, name in rows[:40] + [("", "...")] + rows[-10:] if len(rows) > 50 else rows:
        if name == "...":
            print("      ...")
            continue
        print(f"{delta:9.0f} {b.get(name, 0):9.0f} {a.get(name, 0):9.0f}  {name[:160]}")


if __name__ == "__main__":
    main()
