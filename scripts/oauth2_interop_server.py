"""An OAuth 2.0 token endpoint and a protected resource for Courier's interop tests, built on Authlib.

Authlib implements the token endpoint (RFC 6749: password, client credentials and refresh-token
grants, client authentication) and bearer-token validation (RFC 6750); this file only supplies
in-memory storage. Access tokens live EXPIRES_IN seconds (2 by default) so tests see expiry.
Usage: python3 oauth2_interop_server.py PORT
"""
import os
import secrets
import sys
import threading
import time

from authlib.integrations.flask_oauth2 import AuthorizationServer, ResourceProtector
from authlib.oauth2.rfc6749 import ClientMixin, TokenMixin, grants
from authlib.oauth2.rfc6750 import BearerTokenValidator
from flask import Flask, jsonify

EXPIRES_IN = int(os.environ.get("EXPIRES_IN", "2"))
lock = threading.Lock()
tokens = {}          # access token -> Token
refresh_tokens = {}  # refresh token -> Token
stats = {"refresh": 0, "password": 0, "client_credentials": 0}


class Client(ClientMixin):
    client_id = "courier"
    client_secret = "courier-secret"

    def get_client_id(self):
        return self.client_id

    def get_default_redirect_uri(self):
        return None

    def get_allowed_scope(self, scope):
        return scope or ""

    def check_redirect_uri(self, redirect_uri):
        return False

    def check_client_secret(self, client_secret):
        return secrets.compare_digest(client_secret, self.client_secret)

    def check_endpoint_auth_method(self, method, endpoint):
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type):
        return False

    def check_grant_type(self, grant_type):
        return grant_type in ("password", "client_credentials", "refresh_token")


class Token(TokenMixin):
    def __init__(self, data, user):
        self.data = dict(data)
        self.user = user
        self.issued_at = time.time()
        self.revoked = False

    def check_client(self, client):
        return True

    def get_scope(self):
        return self.data.get("scope", "")

    def get_expires_in(self):
        return self.data.get("expires_in", EXPIRES_IN)

    def is_expired(self):
        return time.time() >= self.issued_at + self.get_expires_in()

    def is_revoked(self):
        return self.revoked


CLIENT = Client()
USERS = {"ada": "lovelace"}


class PasswordGrant(grants.ResourceOwnerPasswordCredentialsGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]

    def authenticate_user(self, username, password):
        if USERS.get(username) == password:
            with lock:
                stats["password"] += 1
            return username
        return None


class ClientCredentialsGrant(grants.ClientCredentialsGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]


class RefreshTokenGrant(grants.RefreshTokenGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]
    INCLUDE_NEW_REFRESH_TOKEN = True

    def authenticate_refresh_token(self, refresh_token):
        with lock:
            token = refresh_tokens.get(refresh_token)
        if token and not token.revoked:
            return token
        return None

    def authenticate_user(self, credential):
        return credential.user

    def revoke_old_credential(self, credential):
        with lock:
            stats["refresh"] += 1
            credential.revoked = True
            refresh_tokens.pop(credential.data.get("refresh_token"), None)


def save_token(token_data, request):
    token = Token(token_data, getattr(request, "user", None))
    with lock:
        tokens[token_data["access_token"]] = token
        if "refresh_token" in token_data:
            refresh_tokens[token_data["refresh_token"]] = token


app = Flask(__name__)
app.config["OAUTH2_REFRESH_TOKEN_GENERATOR"] = True
app.config["OAUTH2_TOKEN_EXPIRES_IN"] = {"password": EXPIRES_IN, "client_credentials": EXPIRES_IN, "refresh_token": EXPIRES_IN}
server = AuthorizationServer(app, query_client=lambda client_id: CLIENT if client_id == CLIENT.client_id else None, save_token=save_token)
server.register_grant(PasswordGrant)
server.register_grant(ClientCredentialsGrant)
server.register_grant(RefreshTokenGrant)


class Validator(BearerTokenValidator):
    def authenticate_token(self, token_string):
        with lock:
            return tokens.get(token_string)


require_oauth = ResourceProtector()
require_oauth.register_token_validator(Validator())


@app.route("/oauth/token", methods=["POST"])
def issue_token():
    return server.create_token_response()


@app.route("/api/me")
@require_oauth()
def me():
    return jsonify({"id": 1, "title": "hello from authlib"})


@app.route("/stats")
def show_stats():
    with lock:
        return jsonify(stats)


@app.route("/revoke-all-refresh", methods=["POST"])
def revoke_all_refresh():
    with lock:
        for token in refresh_tokens.values():
            token.revoked = True
        refresh_tokens.clear()
    return jsonify({"ok": True})


if __name__ == "__main__":
    os.environ.setdefault("AUTHLIB_INSECURE_TRANSPORT", "1")  # loopback http in tests
    import logging
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from werkzeug.serving import make_server
    http = make_server("127.0.0.1", int(sys.argv[1]), app, threaded=True)
    print("ready", flush=True)
    http.serve_forever()
