#!/usr/bin/env bash
# Runs the tests of URLSessionTransport over TLS (URLSessionTLSTests) with the test CA trusted.
#
# On Linux URLSession (FoundationNetworking over libcurl) trusts only the system's CA bundle and
# has no per-session trust setting. This script makes a private mount namespace (needs root and
# util-linux's unshare), bind-mounts a copy of the system bundle over it there, and runs the suite
# with COURIER_TEST_PRIVATE_CA_BUNDLE naming it: the tests add the CAs they make to the copy. The
# system's bundle itself is never written; the copy is gone when the namespace ends.
#
# Fails when the suite was skipped or ran no test, so it can never pass without running.
set -euo pipefail
cd "$(dirname "$0")/.."

bundle=/etc/ssl/certs/ca-certificates.crt
[ "$(id -u)" = 0 ] || { echo "test-urlsession-tls: needs root (a private mount namespace)" >&2; exit 1; }
[ -f "$bundle" ] || { echo "test-urlsession-tls: no CA bundle at $bundle (apt install ca-certificates)" >&2; exit 1; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
unshare --mount --propagation private bash -c '
    set -euo pipefail
    copy=$(mktemp)
    cp "$1" "$copy"
    mount --bind "$copy" "$1"
    COURIER_TEST_PRIVATE_CA_BUNDLE="$1" swift test --filter URLSessionTLSTests "${@:2}"
' _ "$bundle" "$@" 2>&1 | tee "$log" || status=$?
[ "$status" = 0 ] || exit "$status"
if grep -q "skipped" "$log"; then
    echo "test-urlsession-tls: tests were skipped" >&2
    exit 1
fi
passed=$(grep -cE "✔ Test .*passed" "$log" || true)
[ "$passed" -gt 0 ] || { echo "test-urlsession-tls: no test ran" >&2; exit 1; }
echo "test-urlsession-tls: $passed tests passed with the test CA in a private bundle"
