"""An OAuth 2.0 token endpoint and a protected resource for Courier's interop tests, built on Authlib.

Authlib implements the token endpoint (RFC 6749: password, client credentials, refresh-token and
authorization-code grants, client authentication), PKCE (RFC 7636), token revocation (RFC 7009)
and bearer-token validation (RFC 6750); this file only supplies in-memory storage, two clients
(`courier`, confidential, and `courier-app`, public) and an authorization endpoint whose user has
already consented (it redirects to `courier://callback` with a code at once). Access tokens live EXPIRES_IN seconds (2 by default) so tests see expiry.
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
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge
from flask import Flask, jsonify

EXPIRES_IN = int(os.environ.get("EXPIRES_IN", "2"))
lock = threading.Lock()
tokens = {}          # access token -> Token
refresh_tokens = {}  # refresh token -> Token
stats = {"refresh": 0, "password": 0, "client_credentials": 0, "authorization_code": 0, "revoked": 0}
codes = {}           # authorization code -> AuthorizationCode
REDIRECT_URI = "courier://callback"


class Client(ClientMixin):
    client_id = "courier"
    client_secret = "courier-secret"

    def get_client_id(self):
        return self.client_id

    def get_default_redirect_uri(self):
        return REDIRECT_URI

    def get_allowed_scope(self, scope):
        return scope or ""

    def check_redirect_uri(self, redirect_uri):
        return redirect_uri == REDIRECT_URI

    def check_client_secret(self, client_secret):
        return secrets.compare_digest(client_secret, self.client_secret)

    def check_endpoint_auth_method(self, method, endpoint):
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type):
        return response_type == "code"

    def check_grant_type(self, grant_type):
        return grant_type in ("password", "client_credentials", "refresh_token", "authorization_code")


class PublicClient(Client):
    """An app that cannot keep a secret: it authenticates with nothing, and must use PKCE."""
    client_id = "courier-app"
    client_secret = ""

    def check_client_secret(self, client_secret):
        return False

    def check_endpoint_auth_method(self, method, endpoint):
        return method == "none"

    def check_grant_type(self, grant_type):
        return grant_type in ("authorization_code", "refresh_token")


class AuthorizationCode:
    def __init__(self, code, client_id, redirect_uri, scope, challenge, method):
        self.code = code
        self.client_id = client_id
        self.redirect_uri = redirect_uri
        self.scope = scope
        self.code_challenge = challenge
        self.code_challenge_method = method

    def get_redirect_uri(self):
        return self.redirect_uri

    def get_scope(self):
        return self.scope or ""


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
CLIENTS = {CLIENT.client_id: CLIENT, PublicClient.client_id: PublicClient()}
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


class AuthorizationCodeGrant(grants.AuthorizationCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post", "none"]

    def save_authorization_code(self, code, request):
        data = request.payload.data
        with lock:
            codes[code] = AuthorizationCode(
                code, request.client.get_client_id(), request.payload.redirect_uri, request.payload.scope,
                data.get("code_challenge"), data.get("code_challenge_method"),
            )

    def query_authorization_code(self, code, client):
        with lock:
            item = codes.get(code)
        return item if item is not None and item.client_id == client.get_client_id() else None

    def delete_authorization_code(self, authorization_code):
        with lock:
            codes.pop(authorization_code.code, None)
            stats["authorization_code"] += 1

    def authenticate_user(self, authorization_code):
        return {"id": 1}


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
app.config["OAUTH2_TOKEN_EXPIRES_IN"] = {"password": EXPIRES_IN, "client_credentials": EXPIRES_IN, "refresh_token": EXPIRES_IN, "authorization_code": EXPIRES_IN}
server = AuthorizationServer(app, query_client=lambda client_id: CLIENTS.get(client_id), save_token=save_token)
server.register_grant(PasswordGrant)
server.register_grant(ClientCredentialsGrant)
server.register_grant(RefreshTokenGrant)
server.register_grant(AuthorizationCodeGrant, [CodeChallenge(required=True)])


class Revocation(RevocationEndpoint):
    CLIENT_AUTH_METHODS = ["client_secret_basic", "client_secret_post", "none"]

    def query_token(self, token_string, token_type_hint):
        with lock:
            return tokens.get(token_string) or refresh_tokens.get(token_string)

    def revoke_token(self, token, request):
        with lock:
            token.revoked = True
            stats["revoked"] += 1
            tokens.pop(token.data.get("access_token"), None)
            refresh_tokens.pop(token.data.get("refresh_token"), None)


server.register_endpoint(Revocation)


class Validator(BearerTokenValidator):
    def authenticate_token(self, token_string):
        with lock:
            return tokens.get(token_string)


require_oauth = ResourceProtector()
require_oauth.register_token_validator(Validator())


@app.route("/oauth/token", methods=["POST"])
def issue_token():
    return server.create_token_response()


@app.route("/oauth/authorize")
def authorize():
    # The user has already consented: the code goes to the redirect URI at once (a 302).
    return server.create_authorization_response(grant_user={"id": 1})


@app.route("/oauth/revoke", methods=["POST"])
def revoke():
    return server.create_endpoint_response("revocation")


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
