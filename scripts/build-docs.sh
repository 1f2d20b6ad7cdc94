#!/usr/bin/env bash
# Builds the DocC documentation of every library product with warnings as errors: a broken
# ``symbol`` link, a <doc:article> that does not exist, or a doc comment that lost its
# declaration fails the build.
#
# Usage: scripts/build-docs.sh [output-directory]    (default: .build/docs)
set -euo pipefail
cd "$(dirname "$0")/.."

output=${1:-.build/docs}
targets=(Courier CourierAsyncHTTPClient CourierTesting CourierConformance CourierOpenAPI CourierTelemetry CourierOutbox CourierProtobuf)
target_args=()
for target in "${targets[@]}"; do target_args+=(--target "$target"); done
mkdir -p "$output"
swift package --allow-writing-to-directory "$output" generate-documentation \
    "${target_args[@]}" --output-path "$output" --warnings-as-errors --enable-experimental-combined-documentation
echo "docs: ${targets[*]} built without warnings into $output"
