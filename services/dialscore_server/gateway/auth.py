"""Bearer-token auth on the HTTP API (off when no token is configured)."""

from __future__ import annotations

import os

#: Routes anyone may call: liveness and the API's own documentation.
PUBLIC_PATHS = frozenset({"/healthz", "/docs", "/openapi.json", "/docs/oauth2-redirect", "/redoc"})


def read_token(env_var: str) -> str | None:
    """The bearer token: the env var's value, or the content of the file it names as `file:PATH`."""
    value = os.environ.get(env_var, "").strip()
    if value.startswith("file:"):
        with open(value[5:], encoding="utf-8") as fh:
            value = fh.read().strip()
    return value or None


def authorized(token: str | None, path: str, authorization: str | None) -> bool:
    """Whether a request to `path` with this Authorization header may proceed."""
    return token is None or path in PUBLIC_PATHS or authorization == f"Bearer {token}"
