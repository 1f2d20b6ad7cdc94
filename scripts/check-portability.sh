#!/usr/bin/env bash
# Checks what a Linux build cannot: that a clone of this repository works on the file systems of
# macOS and Windows, and that platform modules are imported only where the platform has them.
#
# Fails (exit 1, one line per finding) on:
#   - two tracked paths (files or the folders above them) that are equal ignoring case: on the
#     default case-insensitive file system of macOS (and on Windows) they are one path;
#   - a path component that macOS or Windows refuses: one of < > : " \ | ? * or a control
#     character, a trailing space or dot, or a name Windows reserves (CON, PRN, AUX, NUL,
#     COM1-9, LPT1-9, with any extension);
#   - in a Swift file, an import of a module only some platforms have (FoundationNetworking,
#     Glibc, Musl, Darwin, Security, Network, CFNetwork, UIKit, AppKit) outside an `#if` branch
#     whose condition contains `canImport(`.
#
# Usage: scripts/check-portability.sh [--self-test]
set -euo pipefail
cd "$(dirname "$0")/.."

check() {
    python3 -c "$checker"
}

checker=$(cat <<'PY'
import re
import sys
import unicodedata

paths = [line for line in sys.stdin.read().split("\0") if line]
findings = []

# 1. Paths equal ignoring case (a folder counts once, under each spelling it has).
spellings = {}
for path in paths:
    parts = path.split("/")
    for end in range(1, len(parts) + 1):
        prefix = "/".join(parts[:end])
        key = unicodedata.normalize("NFC", prefix).casefold()
        spellings.setdefault(key, set()).add(prefix)
for key, names in sorted(spellings.items()):
    if len(names) > 1:
        findings.append("paths equal ignoring case: " + ", ".join(sorted(names)))

# 2. Components macOS or Windows refuse.
reserved = re.compile(r"^(con|prn|aux|nul|com[1-9]|lpt[1-9])(\..*)?$", re.IGNORECASE)
for path in paths:
    for part in path.split("/"):
        bad = sorted({c for c in part if c in '<>:"\\|?*' or ord(c) < 32 or ord(c) == 127})
        if bad:
            findings.append(f"{path}: {part!r} has characters Windows or macOS refuse: {''.join(bad)!r}")
        if part.endswith(" ") or part.endswith("."):
            findings.append(f"{path}: {part!r} ends with a space or a dot (Windows drops it)")
        if reserved.match(part):
            findings.append(f"{path}: {part!r} is a name Windows reserves")

# 3. Platform modules imported outside `#if canImport(...)`.
platform = "FoundationNetworking|Glibc|Musl|Darwin|Security|Network|CFNetwork|UIKit|AppKit"
import_line = re.compile(r"^\s*(?:@[\w()]+\s+)*import\s+(?:(?:typealias|struct|class|enum|protocol|let|var|func)\s+)?(" + platform + r")\b")
directive = re.compile(r"^\s*#(if|elseif|else|endif)\b(.*)$")
for path in paths:
    if not path.endswith(".swift"):
        continue
    try:
        text = open(path, encoding="utf-8").read()
    except (FileNotFoundError, IsADirectoryError):
        continue
    stack = []  # the condition of the branch we are in, per open #if
    in_block_comment = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if in_block_comment:
            if "*/" in stripped:
                in_block_comment = False
            continue
        if stripped.startswith("/*") and "*/" not in stripped:
            in_block_comment = True
            continue
        match = directive.match(line)
        if match:
            word, rest = match.group(1), match.group(2).split("//")[0].strip()
            if word == "if":
                stack.append(rest)
            elif word == "elseif" and stack:
                stack[-1] = rest
            elif word == "else" and stack:
                stack[-1] = ""
            elif word == "endif" and stack:
                stack.pop()
            continue
        match = import_line.match(line)
        if match and not any("canImport(" in condition for condition in stack):
            findings.append(f"{path}:{number}: import {match.group(1)} outside #if canImport(...)")

for finding in findings:
    print(finding)
sys.exit(1 if findings else 0)
PY
)

if [ "${1:-}" = "--self-test" ]; then
    # Each bad case must be found and the good one must pass: a check that finds nothing is no check.
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    cd "$scratch"
    mkdir -p ok bad
    printf '#if canImport(Glibc)\nimport Glibc\n#elseif canImport(Musl)\nimport Musl\n#endif\n#if canImport(FoundationNetworking)\n@preconcurrency import FoundationNetworking\n#endif\n' > ok/Good.swift
    printf '#if canImport(Darwin)\nimport Darwin\n#else\nimport Glibc\n#endif\n' > bad/ElseBranch.swift
    printf 'import FoundationNetworking\n' > bad/Plain.swift
    expect() {
        local want=$1 label=$2
        shift 2
        local status=0
        printf '%s\0' "$@" | check >/dev/null || status=$?
        if [ "$status" != "$want" ]; then echo "self-test failed: $label (exit $status, expected $want)"; exit 1; fi
    }
    expect 0 "portable paths and guarded imports" Sources/Courier/A.swift Sources/CourierCLI/B.swift ok/Good.swift
    expect 1 "folders equal ignoring case" Sources/Courier/A.swift Sources/courier/B.swift
    expect 1 "files equal ignoring case" README.md readme.md
    expect 1 "a colon" "docs/a:b.md"
    expect 1 "a reserved name" "Sources/aux.swift"
    expect 1 "a trailing dot" "notes./a.md"
    expect 1 "an import in an #else branch" bad/ElseBranch.swift
    expect 1 "an unguarded import" bad/Plain.swift
    echo "check-portability self-test: 8 cases as expected"
    exit 0
fi

git ls-files -z | check
echo "check-portability: $(git ls-files | wc -l) tracked paths, no case clash, no refused name, platform imports guarded"
