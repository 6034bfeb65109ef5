"""Bearer-token auth on the HTTP API.

The token reaches a gateway replica through its process environment: the variable named by
``AppArgs.auth_token_env`` (default ``DIALSCORE_API_TOKEN``) holds the token itself or
``file:PATH`` naming a file that holds it. A Ray worker inherits the environment of its node, so
the variable must be set on *every* node a gateway replica may be placed on (on KubeRay: the
same required secret on the head and on every worker group; see deployments/kuberay/). A node
without it would serve the API unauthenticated, so ``auth_required`` makes a gateway replica
refuse to start there instead (:func:`gateway_token`): the deployment then fails closed.

Tokens are compared in constant time (:func:`hmac.compare_digest`).
"""

from __future__ import annotations

import hmac
import os
import socket

#: Routes anyone may call: liveness and the API's own documentation.
PUBLIC_PATHS = frozenset({"/healthz", "/docs", "/openapi.json", "/docs/oauth2-redirect", "/redoc"})


class AuthConfigError(RuntimeError):
    """Auth is required but this process has no token: the gateway replica must not start."""


def read_token(env_var: str) -> str | None:
    """The bearer token: the env var's value, or the content of the file it names as `file:PATH`
    (None when the variable is unset or empty; a named file that is missing raises OSError)."""
    value = os.environ.get(env_var, "").strip()
    if value.startswith("file:"):
        with open(value[5:], encoding="utf-8") as fh:
            value = fh.read().strip()
    return value or None


def gateway_token(env_var: str, required: bool) -> str | None:
    """The token of one gateway replica. With `required`, a missing variable, an empty value or
    an unreadable ``file:`` raise :class:`AuthConfigError` naming the variable and the host, so
    Serve reports why the replica did not start; without it, no token means auth is off."""
    try:
        token = read_token(env_var)
    except OSError as exc:
        if required:
            raise AuthConfigError(f"auth_required: cannot read the token file named by {env_var} on "
                                  f"{socket.gethostname()}: {exc}") from None
        raise
    if token is None and required:
        raise AuthConfigError(
            f"auth_required is set but {env_var} is unset or empty on {socket.gethostname()}: this "
            "gateway replica refuses to serve the API without auth. Set it on every Ray node "
            "(on KubeRay: the API-token secret on the head and on every worker group).")
    return token


def authorized(token: str | None, path: str, authorization: str | None) -> bool:
    """Whether a request to `path` with this Authorization header may proceed (constant-time
    comparison of the whole header with ``Bearer <token>``)."""
    if token is None or path in PUBLIC_PATHS:
        return True
    if authorization is None:
        return False
    # Bytes, not str: compare_digest refuses non-ASCII str, and a header may carry any octet.
    return hmac.compare_digest(authorization.encode("utf-8", "surrogateescape"),
                               f"Bearer {token}".encode("utf-8"))
