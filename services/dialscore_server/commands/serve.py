"""`dialscore serve`: run the service in the foreground on the embedded default (a local Ray
instance), until Ctrl-C or SIGTERM. Then it drains: new connections are refused, the requests in
flight are answered (for at most --drain-s seconds), and only then does Serve stop; the exit
status is 0. This is the command the container image runs outside a Ray cluster
(docs/operating/index.md).

    dialscore serve                                  the packaged deployments/local.yaml (stand-ins)
    dialscore serve --config my.yaml --port 8080     any Serve config's first application
    dialscore serve MODEL_OR_PATH [--family causal|seq2seq] [--like ENTRY] [--dtype D] [--device D] [--name N]
                                                     one checkpoint (family and format read from its config)

On a Ray cluster use Serve's own tooling instead (`serve deploy deployments/cluster.yaml`).
"""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("serve", help="run the service on a local Ray instance until interrupted",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", default=None, metavar="MODEL_OR_PATH",
                   help="serve this one checkpoint (a folder or a hub id) instead of a config")
    p.add_argument("--family", choices=["causal", "seq2seq"], default=None,
                   help="with MODEL: its family (default: read from its config)")
    p.add_argument("--like", default=None, metavar="ENTRY",
                   help="with MODEL: take the dialogue format from this registry entry, e.g. "
                   "blenderbot-400m (default: by the config's model_type, else its family's)")
    p.add_argument("--dtype", default=None, help="with MODEL: weights' dtype (float32, bfloat16...)")
    p.add_argument("--device", default=None, help="with MODEL: auto, cpu, cuda:0...")
    p.add_argument("--name", default=None, help="with MODEL: the served name (default: its folder)")
    p.add_argument("--config", default=None,
                   help="Serve config whose first application's args are used (default: the "
                   "packaged deployments/local.yaml)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    p.add_argument("--allowed-hosts", default=None, metavar="NAMES",
                   help="comma-separated Host names or addresses accepted besides loopback ones "
                   "while auth is off (a guard against DNS rebinding); `*` accepts any. Default: "
                   "DIALSCORE_ALLOWED_HOSTS, else the config's allowed_hosts, else loopback only")
    p.add_argument("--drain-s", type=float, default=25.0,
                   help="on Ctrl-C or SIGTERM, how long the requests in flight may take to be "
                   "answered before the service stops anyway (default 25: inside Kubernetes' "
                   "default grace period of 30 s)")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import signal
    import threading

    from dialscore_server.contract.host_check import host_entries
    from dialscore_server.gateway.embedded import LOCAL_CONFIG, app_args_from_yaml, serve_locally

    if args.model is not None:
        if args.config is not None:
            raise SystemExit("give MODEL_OR_PATH or --config, not both")
        from dialscore_server.gateway.checkpoint_args import checkpoint_app_args

        try:
            app_args = checkpoint_app_args(args.model, family=args.family, dtype=args.dtype,
                                           device=args.device, name=args.name, like=args.like)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"dialscore serve: {exc}") from None
    else:
        app_args = app_args_from_yaml(args.config or LOCAL_CONFIG)
    if not args.drain_s >= 0:
        raise SystemExit("dialscore serve: --drain-s must be >= 0")
    stop = threading.Event()
    allowed = host_entries(args.allowed_hosts) if args.allowed_hosts is not None else None
    try:
        with serve_locally(app_args, host=args.host, port=args.port, allowed_hosts=allowed,
                           drain_s=args.drain_s) as url:
            # Set once the service runs: ray.init replaces any handler set before it.
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: stop.set())
            print(f"dialscore serving at {url} (docs: {url}/docs); Ctrl-C or SIGTERM stops it",
                  flush=True)
            stop.wait()
    except SystemExit as exc:
        # Until then a SIGTERM meets ray.init's handler, sys.exit(SIGTERM), which can come while
        # /readyz already answers (the app is up before serve.run returns): the drain and the
        # shutdown have run all the same on the way out, so it is a stop like any other.
        if exc.code != signal.SIGTERM:
            raise
    print("stopped")
    return 0
