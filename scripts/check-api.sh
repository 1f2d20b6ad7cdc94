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
report=$(mktemp)
trap 'rm -f "$report"' EXIT
status=0
swift package diagnose-api-breaking-changes "$baseline" --products "${products[@]}" | tee "$report" || status=$?
[ "$status" = 0 ] && exit 0

# The digester also reports `package` declarations (shared between this package's own modules,
# never seen by an app). A breakage counts only when every name in its path (`Type.member`) is
# declared public or open in the baseline's sources; the others are listed and let pass. If the
# command failed without reporting any breakage (a build error), it fails here too.
baseline_sources=$(mktemp -d)
git archive "$baseline" Sources | tar -x -C "$baseline_sources"
python3 - "$report" "$baseline_sources" <<'PY'
import pathlib
import re
import sys

report = pathlib.Path(sys.argv[1]).read_text(errors="replace")
text = "\n".join(p.read_text(errors="replace") for p in pathlib.Path(sys.argv[2]).rglob("*.swift"))
breakages = [line.strip() for line in report.splitlines() if "API breakage:" in line]
if not breakages:
    print("check-api: the comparison failed without reporting a breakage (see above)")
    sys.exit(1)

def public(name):
    if name == "init":
        pattern = r"\b(public|open)\b[^\n]*\binit\b"
    else:
        pattern = r"\b(public|open)\b[^\n]*\b(func|var|let|case|class|struct|enum|protocol|actor|typealias|subscript)\s+`?" + re.escape(name) + r"\b"
    return re.search(pattern, text) is not None

counted = []
for line in breakages:
    match = re.search(r"API breakage: (?:[a-z]+ )+?([A-Za-z_][\w.]*)", line)
    path = match.group(1) if match else ""
    names = [part for part in path.split(".") if part]
    if names and not all(public(name) for name in names):
        print(f"check-api: not public, let pass: {line}")
    else:
        counted.append(line)
for line in counted:
    print(f"check-api: BREAKS THE PUBLIC API: {line}")
sys.exit(1 if counted else 0)
PY
