"""A JSON-RPC 2.0 server for Courier's interop tests, built on the jsonrpcserver package.

jsonrpcserver does all JSON-RPC processing (parsing, dispatch, batches, error objects); this file
only carries it over HTTP on a loopback port, answering 204 when there is nothing to return
(notifications). Usage: python3 jsonrpc_interop_server.py PORT
"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from jsonrpcserver import Error, Result, Success, dispatch, method

notifications = []


@method
def add(a: int, b: int) -> Result:
    return Success(a + b)


@method
def subtract(minuend: int, subtrahend: int) -> Result:
    return Success(minuend - subtrahend)


@method
def divide(a: float, b: float) -> Result:
    if b == 0:
        return Error(4000, "division by zero", {"dividend": a})
    return Success(a / b)


@method
def record(event: str) -> Result:
    notifications.append(event)
    return Success(None)


@method
def recorded() -> Result:
    return Success(list(notifications))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        response = dispatch(self.rfile.read(length).decode())
        if response:
            body = response.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, format, *args):  # keep test output quiet
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("ready", flush=True)
    server.serve_forever()
