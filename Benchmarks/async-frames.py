#!/usr/bin/env python3
"""The size of the async frame (context) of each async function in a binary, largest first.

    Benchmarks/async-frames.py [BINARY] [PATTERN]

BINARY defaults to the release benchmark binary (.build-release/release/CourierBenchmarks);
PATTERN is a regular expression on the mangled symbol (default: Courier's own functions).

Each async function has an "async function pointer" (mangled name ending in `Tu`): a 32-bit
relative address and the 32-bit size of the context its caller allocates from the task for a
call. A task starts with one slab of about 1 KB in its own allocation and takes further slabs
from malloc as its frames outgrow it, so on a request path that runs in a new task the sum of
these sizes is roughly the number of kilobytes malloc'd per request. Needs nm, readelf and
swift-demangle (all on the toolchain's or binutils' path).
"""
import re
import struct
import subprocess
import sys

binary = sys.argv[1] if len(sys.argv) > 1 else ".build-release/release/CourierBenchmarks"
pattern = re.compile(sys.argv[2] if len(sys.argv) > 2 else r"^\$s7Courier.*Tu$")

sections = []
for line in subprocess.run(["readelf", "-SW", binary], capture_output=True, text=True, check=True).stdout.splitlines():
    match = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
    if match:
        sections.append((int(match.group(2), 16), int(match.group(3), 16), int(match.group(4), 16)))

with open(binary, "rb") as file:
    data = file.read()

found = []
for line in subprocess.run(["nm", binary], capture_output=True, text=True, check=True).stdout.splitlines():
    parts = line.split()
    if len(parts) != 3 or not pattern.search(parts[2]):
        continue
    address = int(parts[0], 16)
    for start, offset, size in sections:
        if start <= address < start + size:
            position = address - start + offset
            _, context = struct.unpack("<iI", data[position:position + 8])
            found.append((context, parts[2]))
            break

names = subprocess.run(["swift", "demangle", "--simplified"], input="\n".join(name for _, name in found),
                       capture_output=True, text=True, check=True).stdout.splitlines()
for (context, _), name in sorted(zip(found, names), key=lambda row: -row[0][0]):
    print(f"{context:7d}  {name.removeprefix('async function pointer to ')}")
