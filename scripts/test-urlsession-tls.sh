#!/usr/bin/env bash
# Runs the tests of URLSessionTransport over TLS with the test CA trusted: URLSessionTLSTests, then
# every test whose transports are `TransportKind.overTLS` (listed below; a test checks the list),
# which run on both transports here and on AsyncHTTPClient only in a plain `swift test`.
#
# On Linux URLSession (FoundationNetworking over libcurl) trusts only the system's CA bundle and
# has no per-session trust setting. This script makes a private mount namespace (needs root and
# util-linux's unshare), bind-mounts a copy of the system bundle over it there, and runs the suite
# with COURIER_TEST_PRIVATE_CA_BUNDLE naming it: the tests add the CAs they make to the copy. The
# system's bundle itself is never written; the copy is gone when the namespace ends.
#
# The two runs are separate processes: URLSessionTLSTests add CAs of their own to the bundle as
# they go, which must not happen while another test's URLSession reads it.
#
# Fails when a test was skipped or none ran, so it can never pass without running.
set -euo pipefail
cd "$(dirname "$0")/.."

# The tests over TLS that run on both transports in the private namespace.
over_tls=(
    'HTTP2Tests/alpnNegotiatesHTTP2OverTLS'
    'HTTP2Tests/hundredConcurrentRequestsShareOneHTTP2Connection'
    'HTTP2Tests/misbehaviourOnAnHTTP2StreamIsATransportError'
    'HTTP2Tests/aResponseWithoutALengthOverHTTP2CarriesNoTransferEncodingField'
    'HTTP2MisbehaviourTests/goAwayBelowAnInFlightStreamRetriesOnlyTheUnprocessedOne'
    'HTTP2MisbehaviourTests/oneConcurrentStreamAllowedStillServesAHundredRequestsOnOneConnection'
    'HTTP2MisbehaviourTests/aRequestBodyWindowThatNeverOpensEndsAtTheDeadline'
    'HTTP2MisbehaviourTests/aFloodOfPingsDoesNotStopTheAnswer'
    'HTTP2MisbehaviourTests/aStatusThatIsNotThreeDigitsIsATransportErrorNotACrash'
    'HTTP2MisbehaviourTests/aContentLengthThatIsNoCountIsATransportErrorAlike'
    'HTTP2MisbehaviourTests/aSwitchingProtocolsHeadOverHTTP2IsATransportErrorNotACrash'
    'NetworkFaultTests/aResetMidBodyFailsAsTransportOverHTTP2'
    'NetworkFaultTests/aHeadThatNeverComesEndsAtTheDeadlineOverHTTP2'
    'ResourceLimitTests/tenThousandConcurrentRequestsOverOneHTTP2Connection'
    'RedirectTests/httpsToHTTPDowngradeIsRefused'
    'StreamIdleTests/aStalledHTTP2StreamEndsWhileItsConnectionStaysBusy'
    'PipelineTests/aStalledHTTP2StreamTimesOutWhileTheConnectionCarriesOtherTraffic'
    'RefusedStreamTests/aRefusedStreamIsRetriedEvenForAPostAndOtherResetsAreNot'
    'RefusedStreamTests/aRefusedRedirectHopDoesNotSendThePostAgain'
    'NginxInteropTests/cancellingAnHTTP2RequestReachesNginxAndItsUpstream'
)
filter=$(IFS='|'; echo "${over_tls[*]}")

bundle=/etc/ssl/certs/ca-certificates.crt
[ "$(id -u)" = 0 ] || { echo "test-urlsession-tls: needs root (a private mount namespace)" >&2; exit 1; }
[ -f "$bundle" ] || { echo "test-urlsession-tls: no CA bundle at $bundle (apt install ca-certificates)" >&2; exit 1; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# A run whose process crashed while exiting, after its summary said every test passed, is run once
# more, saying so: seen once (in seven runs) as a NULL lock in OpenSSL on a dispatch thread while the
# process exited (libcurl's TLS teardown racing the exit handlers), not in a test. A crash before the
# summary, or a failed test, fails as it is.
unshare --mount --propagation private bash -c '
    set -euo pipefail
    copy=$(mktemp)
    cp "$1" "$copy"
    mount --bind "$copy" "$1"
    export COURIER_TEST_PRIVATE_CA_BUNDLE="$1"
    run() {
        local out
        out=$(mktemp)
        swift test "$@" 2>&1 | tee "$out" && return 0
        if grep -qE "✔ Test run with [0-9]+ tests? .*passed" "$out" && ! grep -q "✘" "$out" && grep -q "Program crashed" "$out"; then
            echo "test-urlsession-tls: the test process crashed while exiting, after every test had passed; running it once more" >&2
            swift test "$@"
            return
        fi
        return 1
    }
    run --filter URLSessionTLSTests "${@:3}"
    run --skip-build --filter "$2" "${@:3}"
' _ "$bundle" "$filter" "$@" 2>&1 | tee "$log" || status=$?
[ "$status" = 0 ] || exit "$status"
if grep -q "skipped" "$log"; then
    echo "test-urlsession-tls: tests were skipped" >&2
    exit 1
fi
passed=$(grep -cE "✔ Test .*passed" "$log" || true)
[ "$passed" -gt 0 ] || { echo "test-urlsession-tls: no test ran" >&2; exit 1; }
for name in "${over_tls[@]}"; do
    grep -qE "✔ Test ${name#*/}\(.*passed" "$log" || { echo "test-urlsession-tls: ${name} did not pass" >&2; exit 1; }
done
echo "test-urlsession-tls: $passed tests passed with the test CA in a private bundle"
