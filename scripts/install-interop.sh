#!/usr/bin/env bash
# Installs the third-party servers Courier's interop tests run against (loopback only).
set -euo pipefail
python3 -m pip install --quiet --disable-pip-version-check "jsonrpcserver==5.0.9"
python3 -c "import jsonrpcserver" 
echo "interop servers installed: jsonrpcserver"
