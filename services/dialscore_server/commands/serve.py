"""`dialscore serve`: run the service in the foreground on the embedded default (a local Ray
instance), until Ctrl-C or SIGTERM.

    dialscore serve                                  the packaged deployments/local.yaml (stand-ins)
    dialscore serve --config my.yaml --port 8080     any Serve config's first application

On a Ray cluster use Serve's own tooling instead (`serve deploy deployments/cluster.yaml`).
"""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("serve", help="run the service on a local Ray instance until interrupted",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=None,
                   help="Serve config whose first application's args are used (default: the "
                   "packaged deployments/local.yaml)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import signal
    import threading

    from dialscore_server.gateway.embedded import LOCAL_CONFIG, app_args_from_yaml, serve_locally

    app_args = app_args_from_yaml(args.config or LOCAL_CONFIG)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with serve_locally(app_args, host=args.host, port=args.port) as url:
        print(f"dialscore serving at {url} (docs: {url}/docs); Ctrl-C or SIGTERM stops it",
              flush=True)
        stop.wait()
    print("stopped")
    return 0
