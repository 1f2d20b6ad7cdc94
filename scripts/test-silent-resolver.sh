#!/usr/bin/env bash
# Runs SilentResolverTests with a resolver that never answers: a private mount namespace (needs
# root and util-linux's unshare) with /etc/resolv.conf naming a loopback address where a UDP
# socket takes every query and answers none (one attempt, 12 s timeout). The system's
# resolv.conf is never written; the namespace and the listener end with the script.
#
# Fails when the suite was skipped or did not pass, so it can never pass without running.
set -euo pipefail
cd "$(dirname "$0")/.."

[ "$(id -u)" = 0 ] || { echo "test-silent-resolver: needs root (a private mount namespace)" >&2; exit 1; }
address=127.0.0.153
python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 53))
print("listening", flush=True)
while True:
    s.recvfrom(4096)
' "$address" > /tmp/courier-silent-resolver.$$ 2>&1 &
listener=$!
log=$(mktemp)
conf=$(mktemp)
trap 'kill $listener 2>/dev/null || true; rm -f "$log" "$conf" /tmp/courier-silent-resolver.$$' EXIT
for _ in $(seq 50); do grep -q listening /tmp/courier-silent-resolver.$$ 2>/dev/null && break; sleep 0.1; done
grep -q listening /tmp/courier-silent-resolver.$$ || { cat /tmp/courier-silent-resolver.$$ >&2; exit 1; }
printf 'nameserver %s\noptions timeout:12 attempts:1\n' "$address" > "$conf"
status=0
unshare --mount --propagation private bash -c '
    set -euo pipefail
    mount --bind "$1" /etc/resolv.conf
    export COURIER_TEST_SILENT_RESOLVER=1
    swift test --filter SilentResolverTests "${@:2}"
' _ "$conf" "$@" 2>&1 | tee "$log" || status=$?
[ "$status" = 0 ] || exit "$status"
if grep -q "skipped" "$log"; then
    echo "test-silent-resolver: the suite was skipped" >&2
    exit 1
fi
for name in aLookupThatNeverAnswersEndsAtTheDeadline theNextRequestIsNotHeldByACancelledLookup transportsWaitingBehindALookupHoldFewThreads \
    aSpooledUploadCancelledWhileItsTaskWaitsToBeMadeLeavesNoFile; do
    grep -qE "✔ Test ${name}\(.*passed" "$log" || { echo "test-silent-resolver: ${name} did not pass" >&2; exit 1; }
done
echo "test-silent-resolver: passed with a resolver that never answers"
