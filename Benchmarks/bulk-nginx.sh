#!/usr/bin/env bash
# Bulk downloads from nginx over TLS (HTTP/2 and HTTP/1.1): curl, raw AsyncHTTPClient and Courier
# side by side, in one run of the transfer benchmark, each transfer in a process of its own.
#
#   Benchmarks/bulk-nginx.sh [MEGABYTES] [ROUNDS]     (defaults: 1024 MiB, 3 rounds)
#
# Needs nginx, openssl, curl and python3 (Debian: apt-get install nginx-light openssl curl python3). nginx runs
# as this user from a temporary directory, on a free loopback port, with its defaults for HTTP/2
# (8 KiB DATA frames); the certificate is made here, signed by a CA made here. Set SCRATCH to a
# directory for the file and the downloads (default: a new directory under /tmp), ONLY to run the
# cases whose name contains that text.
set -euo pipefail
megabytes=${1:-1024}
rounds=${2:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
work=${SCRATCH:-$(mktemp -d /tmp/courier-bulk.XXXXXX)}
mkdir -p "$work/www"
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx_bin" ] || { echo "nginx is not installed (apt-get install nginx-light)" >&2; exit 1; }

cleanup() {
    [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
    if [ -z "${SCRATCH:-}" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT

openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/ca.key" -out "$work/ca.pem" -days 2 \
    -subj "/CN=Courier bulk benchmark CA" -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$work/leaf.key" -out "$work/leaf.csr" -subj "/CN=localhost" 2>/dev/null
printf "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n" > "$work/ext.cnf"
openssl x509 -req -in "$work/leaf.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
    -out "$work/leaf.pem" -days 2 -extfile "$work/ext.cnf" 2>/dev/null
[ "$(stat -c %s "$work/www/file.bin" 2>/dev/null || echo 0)" = "$((megabytes << 20))" ] ||
    head -c "$((megabytes << 20))" /dev/urandom > "$work/www/file.bin"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$work/nginx.conf" <<EOF
worker_processes 1;
pid $work/nginx.pid;
error_log $work/error.log;
events { worker_connections 64; }
http {
    access_log off;
    sendfile on;
    client_body_temp_path $work/tmp;
    proxy_temp_path $work/tmp;
    fastcgi_temp_path $work/tmp;
    uwsgi_temp_path $work/tmp;
    scgi_temp_path $work/tmp;
    server {
        listen 127.0.0.1:$port ssl http2;
        ssl_certificate $work/leaf.pem;
        ssl_certificate_key $work/leaf.key;
        root $work/www;
    }
}
EOF
mkdir -p "$work/tmp"
"$nginx_bin" -c "$work/nginx.conf" -p "$work" -e "$work/error.log"
for _ in $(seq 50); do curl -s --cacert "$work/ca.pem" -o /dev/null "https://localhost:$port/" && break || sleep 0.1; done

cd "$root"
swift build -c release --scratch-path .build-release --product CourierBenchmarks >/dev/null
.build-release/release/CourierBenchmarks transfer --megabytes "$megabytes" --rounds "$rounds" \
    --url "https://localhost:$port/file.bin" --ca "$work/ca.pem" --scratch "$work" ${ONLY:+--only "$ONLY"}
