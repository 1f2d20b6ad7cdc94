#!/usr/bin/env bash
# Formats the Swift sources with the toolchain's `swift format` and the repository's .swift-format.
#
# Usage: scripts/format.sh          rewrite the files in place
#        scripts/format.sh --lint   change nothing; fail (exit 1) on any file not formatted so
#                                   (what .ci/run checks)
set -euo pipefail
cd "$(dirname "$0")/.."

# Generated code (the OpenAPI client, the protobuf messages) is kept as its generator writes it.
mapfile -t files < <(git ls-files '*.swift' | grep -v -e '^Examples/PetsAPI/' -e '^Examples/NewsProto/')
if [ "${1:-}" = "--lint" ]; then
    swift format lint --strict --parallel "${files[@]}"
    echo "format: ${#files[@]} Swift files as .swift-format asks"
else
    swift format format --in-place --parallel "${files[@]}"
fi
