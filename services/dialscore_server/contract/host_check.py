"""Which ``Host`` a request may name: the embedded default's guard against DNS rebinding.

A web page on ``http://evil.example`` can make its own name resolve to 127.0.0.1 (DNS rebinding);
the browser then sends the page's requests to a service on this machine's loopback port and lets
the page read the answers, since to the browser it is the page's own origin. What gives it away is
the ``Host`` header, which still names ``evil.example``. So, as Jupyter (``allow_remote_access``,
``local_hostnames``) and Vite (``server.allowedHosts``) do, the embedded default (``dialscore
serve``, ``dialscore demo``) refuses a request whose ``Host`` is not a loopback name or address
unless a setting names it:

* allowed always: ``localhost`` and any name under ``.localhost`` (RFC 6761: they resolve to
  loopback only, and browsers resolve them themselves), any IPv4 address in 127.0.0.0/8, and
  ``[::1]``; with or without a port; names compare case-insensitively, a final dot ignored;
* allowed when listed (:class:`AllowedHosts`; ``AppArgs.allowed_hosts``, ``--allowed-hosts``,
  ``DIALSCORE_ALLOWED_HOSTS``): each name or address listed; ``*`` allows any ``Host``;
* refused: any other ``Host``, and a request without one (every browser sends one), with **403**
  ``host_not_allowed``, param ``Host`` (gateway/observe.py).

The check applies only while auth is off. A bearer token already defeats DNS rebinding: the page
cannot read the token, and the browser never adds it on its own (the API uses no cookies). On a
cluster (Serve YAML, KubeRay) ``allowed_hosts`` is unset by default and the check is off: an
ingress in front of Serve decides which names reach it, and Kubernetes probes name the pod's IP.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: Comma-separated host names or addresses the embedded default accepts besides loopback ones.
ALLOWED_HOSTS_VARIABLE = "DIALSCORE_ALLOWED_HOSTS"

#: The entry that allows any Host.
ANY = "*"


def host_name(host: str) -> str:
    """The name or address of a ``Host`` value, without its port, lower-cased, final dot removed
    (``"LocalHost.:8000"`` → ``"localhost"``, ``"[::1]:8000"`` → ``"::1"``)."""
    host = host.strip()
    if host.startswith("["):  # an IPv6 literal: [addr] or [addr]:port
        end = host.find("]")
        name = host[1:end] if end > 0 else host
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name.rstrip(".").lower()


def is_loopback(name: str) -> bool:
    """Whether `name` (from :func:`host_name`) is ``localhost``, under ``.localhost``, or a
    loopback IP address (127.0.0.0/8, ::1)."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class AllowedHosts:
    """The ``Host`` values a request may carry: loopback ones and `names` (see the module
    docstring); ``*`` among `names` allows any."""

    names: frozenset[str] = frozenset()

    @classmethod
    def of(cls, names: Iterable[str]) -> AllowedHosts:
        """From setting entries (a port or brackets in an entry are ignored; blanks skipped)."""
        return cls(frozenset(ANY if n.strip() == ANY else host_name(n) for n in names if n.strip()))

    @property
    def any(self) -> bool:
        return ANY in self.names

    def allows(self, host: str | None) -> bool:
        """Whether a request whose ``Host`` header is `host` (None: missing) may proceed."""
        if self.any:
            return True
        if not host:
            return False
        name = host_name(host)
        return is_loopback(name) or name in self.names


def host_entries(raw: str) -> list[str]:
    """The entries of a comma-separated setting (``--allowed-hosts``, ``DIALSCORE_ALLOWED_HOSTS``),
    stripped, blanks skipped."""
    return [n.strip() for n in raw.split(",") if n.strip()]


def allowed_hosts_from_environment(environ: Mapping[str, str] = os.environ) -> list[str] | None:
    """The entries of ``DIALSCORE_ALLOWED_HOSTS`` (comma-separated), or None when it is unset."""
    raw = environ.get(ALLOWED_HOSTS_VARIABLE)
    return None if raw is None else host_entries(raw)
