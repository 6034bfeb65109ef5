"""The project's Prometheus metrics, exported by the gateway at GET /metrics.

They sit beside Ray Serve's own `ray_serve_*` metrics (exported by Ray's metrics agent). Batch
figures are measured inside the model replicas and reported back with the first request of each
batch, so every batch is observed exactly once, whichever process computed it.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter("dialscore_requests_total", "HTTP requests by endpoint and status.",
                   ["endpoint", "status"], registry=REGISTRY)
ERRORS = Counter("dialscore_errors_total", "Error responses by endpoint and error type.",
                 ["endpoint", "type"], registry=REGISTRY)
LATENCY = Histogram("dialscore_request_latency_seconds", "Request latency at the gateway.",
                    ["endpoint"], registry=REGISTRY,
                    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
ITEMS = Counter("dialscore_items_scored_total", "Items (NLL targets, dialogues, candidates) scored.",
                ["model"], registry=REGISTRY)
TOKENS = Counter("dialscore_tokens_scored_total", "Tokens fed to models, by side.",
                 ["model", "side"], registry=REGISTRY)
BATCH_SIZE = Histogram("dialscore_batch_items", "Items merged into one engine call (@serve.batch).",
                       ["model"], registry=REGISTRY,
                       buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096))
BATCH_REQUESTS = Histogram("dialscore_batch_requests", "Requests merged into one engine call.",
                           ["model"], registry=REGISTRY, buckets=(1, 2, 3, 4, 6, 8, 12, 16, 32, 64))
BATCH_TOKENS = Histogram("dialscore_batch_tokens", "Real tokens in one engine call.", ["model"],
                         registry=REGISTRY,
                         buckets=(16, 64, 256, 1024, 4096, 16384, 65536, 262144))
PADDING_WASTE = Histogram("dialscore_padding_waste_ratio",
                          "Share of computed positions that were padding, per engine call.",
                          ["model"], registry=REGISTRY,
                          buckets=(0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0))
REUSED_TOKENS = Counter(
    "dialscore_reused_tokens_total",
    "Item tokens not recomputed: a prefix shared by several decoder-only items (within a request "
    "or across requests merged into one engine call) or a seq2seq source encoded once.",
    ["model"], registry=REGISTRY)
IN_FLIGHT = Gauge("dialscore_queue_length", "Requests sent to a model deployment and not yet answered.",
                  ["model"], registry=REGISTRY)
