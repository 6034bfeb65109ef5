"""Command-line options shared by the commands that talk to a running service, and the clients
built from them."""

from __future__ import annotations

import argparse
import os


def comma_list(value: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]`` (an argparse ``type``)."""
    return [v.strip() for v in value.split(",") if v.strip()]


def add_server_args(p: argparse.ArgumentParser, concurrency: int = 4,
                    priority: str = "interactive") -> None:
    """--url, --token, --timeout, --retries, --concurrency, --priority: how to reach the service
    (`priority`: the default lane; the probe and evaluation commands are bulk work)."""
    p.add_argument("--url", default=os.environ.get("DIALSCORE_URL", "http://127.0.0.1:8000"),
                   help="service URL (default: $DIALSCORE_URL or http://127.0.0.1:8000)")
    p.add_argument("--token", default=None, help="bearer token (default: $DIALSCORE_TOKEN)")
    p.add_argument("--timeout", type=float, default=120.0, help="read timeout per request, seconds")
    p.add_argument("--retries", type=int, default=4,
                   help="retries on 408/424/429/502/503/504 and dropped connections (default 4)")
    p.add_argument("--concurrency", type=int, default=concurrency,
                   help=f"requests in flight at once (default {concurrency})")
    p.add_argument("--priority", choices=("bulk", "interactive"), default=priority,
                   help="the service's priority lane to ask for: bulk work yields the engine to "
                   f"interactive requests (header X-Dialscore-Priority; default {priority})")


def _client_kwargs(args: argparse.Namespace) -> dict:
    import httpx

    from dialscore.client import RetryPolicy

    return {"token": args.token, "timeout": httpx.Timeout(args.timeout, connect=10.0),
            "retry": RetryPolicy(max_attempts=args.retries + 1),
            "max_concurrency": args.concurrency, "priority": args.priority}


def client_from_args(args: argparse.Namespace):
    """A :class:`~dialscore.client.DialscoreClient` configured by :func:`add_server_args`' options."""
    from dialscore.client import DialscoreClient

    return DialscoreClient(args.url, **_client_kwargs(args))


def async_client_from_args(args: argparse.Namespace):
    """An :class:`~dialscore.client.AsyncDialscoreClient` configured the same way."""
    from dialscore.client import AsyncDialscoreClient

    return AsyncDialscoreClient(args.url, **_client_kwargs(args))
