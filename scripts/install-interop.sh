#!/usr/bin/env bash
# Installs the third-party servers Courier's interop tests run against, on loopback only:
#   jsonrpcserver (JSON-RPC 2.0), Authlib on Flask (OAuth 2.0 token endpoint), httpbin under
#   gunicorn (HTTP caching endpoints), and mitmproxy
#   (a man in the middle, in its own virtual environment because its dependencies clash).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check "jsonrpcserver==5.0.9" "authlib>=1.3,<2" "flask>=2.3" "httpbin==0.10.4" "gunicorn==23.0.0"
python3 -c "import jsonrpcserver, authlib, flask, httpbin, gunicorn"
venv=.build-interop/mitmproxy-venv
if [ ! -x "$venv/bin/mitmdump" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "mitmproxy==11.0.2"
fi
version=$("$venv/bin/mitmdump" --version)   # read whole: a pipe to head broke it (EPIPE)
echo "${version%%$'\n'*}"
echo "interop servers installed: jsonrpcserver, authlib, httpbin, gunicorn, mitmproxy"
