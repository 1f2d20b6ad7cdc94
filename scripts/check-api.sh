#!/usr/bin/env bash
# Fails when the public API of a library product breaks against the baseline release.
#
# The baseline is the commit named on the first line of .ci/api-baseline that is not a comment.
# Change that file only on purpose: in the commit that makes the intended break (or the release
# after it), with a line in CHANGELOG.md saying what broke.
#
# Usage: scripts/check-api.sh
set -euo pipefail
cd "$(dirname "$0")/.."

baseline=$(grep -v '^[[:space:]]*#' .ci/api-baseline | grep -m1 -E '^[0-9a-f]{40}$' || true)
if [ -z "$baseline" ]; then
    echo "check-api: .ci/api-baseline names no commit (40 hex digits on a line of its own)" >&2
    exit 1
fi
if ! git cat-file -e "$baseline^{commit}" 2>/dev/null; then
    # A shallow clone may not hold the baseline: fetch the history that does.
    git fetch --quiet --unshallow 2>/dev/null || git fetch --quiet origin "$baseline" 2>/dev/null || true
fi
if ! git cat-file -e "$baseline^{commit}" 2>/dev/null; then
    echo "check-api: baseline commit $baseline is not in this clone" >&2
    exit 1
fi

products=(Courier CourierAsyncHTTPClient CourierTesting CourierOpenAPI CourierTelemetry CourierOutbox CourierProtobuf)
echo "check-api: comparing ${products[*]} with $baseline"
swift package diagnose-api-breaking-changes "$baseline" --products "${products[@]}"
