"""The service's metrics, each defined once (:class:`~dialscore_server.metric_recording.Metric`:
this process's registry, and Ray's metrics inside a Serve replica).

Each metric is recorded where it is measured: requests, errors, latency, queue length and body
deadlines in the gateway (so ``GET /metrics`` shows them); items, tokens, batch figures and the
work ledger in the model replica that computed them (``dialscore_server.scheduling``), exported
only through Ray's metrics agent. Ray estimates an exported histogram's ``_sum`` from its
buckets; its counts and the counters are exact.
"""

from __future__ import annotations

from dialscore_server.metric_recording import Metric

REQUESTS = Metric("counter", "dialscore_requests_total", "HTTP requests by endpoint and status.",
                  ["endpoint", "status"])
ERRORS = Metric("counter", "dialscore_errors_total", "Error responses by endpoint and error type.",
                ["endpoint", "type"])
LATENCY = Metric("histogram", "dialscore_request_latency_seconds", "Request latency at the gateway.",
                 ["endpoint"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
ITEMS = Metric("counter", "dialscore_items_scored_total",
               "Items (NLL targets, dialogues, candidates) scored.", ["model"])
TOKENS = Metric("counter", "dialscore_tokens_scored_total", "Tokens fed to models, by side.",
                ["model", "side"])
BATCH_SIZE = Metric("histogram", "dialscore_batch_items",
                    "Items merged into one engine call.", ["model"],
                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096))
BATCH_REQUESTS = Metric("histogram", "dialscore_batch_requests", "Requests merged into one engine call.",
                        ["model"], buckets=(1, 2, 3, 4, 6, 8, 12, 16, 32, 64))
BATCH_TOKENS = Metric("histogram", "dialscore_batch_tokens", "Real tokens in one engine call.", ["model"],
                      buckets=(16, 64, 256, 1024, 4096, 16384, 65536, 262144))
PADDING_WASTE = Metric("histogram", "dialscore_padding_waste_ratio",
                       "Share of computed positions that were padding, per engine call.", ["model"],
                       # Ray's histograms need positive boundaries: le=0.001 holds the calls without padding.
                       buckets=(0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0))
REUSED_TOKENS = Metric(
    "counter", "dialscore_reused_tokens_total",
    "Item tokens not recomputed: a prefix shared by several decoder-only items (within a request "
    "or across requests merged into one engine call) or a seq2seq source encoded once.", ["model"])
CONTEXT_CACHE_LOOKUPS = Metric(
    "counter", "dialscore_context_cache_lookups_total",
    "Context cache lookups of a decoder-only model replica (one per shared-prefix group of an "
    "engine call), by `result`: `hit` found a cached prefix, `miss` none.", ["model", "result"])
CONTEXT_CACHE_TOKENS = Metric(
    "counter", "dialscore_context_cache_tokens_total",
    "Prefix positions a model replica read from its context cache instead of computing them.",
    ["model"])
CONTEXT_CACHE_BYTES = Metric(
    "gauge", "dialscore_context_cache_bytes",
    "Bytes of key/value states a model replica's context cache holds (after its last engine "
    "call; at most serving.context_cache_bytes).", ["model"])
CONTEXT_CACHE_EVICTIONS = Metric(
    "counter", "dialscore_context_cache_evictions_total",
    "Context cache entries a model replica evicted (least recently used) to stay within its "
    "bound.", ["model"])
IN_FLIGHT = Metric("gauge", "dialscore_queue_length",
                   "Requests sent to a model deployment and not yet answered (per gateway replica).",
                   ["model"])

SLOW_CLIENTS = Metric(
    "counter", "dialscore_slow_clients_total",
    "Clients refused for being slow or too many: `body` = the whole body did not arrive within "
    "body_timeout_s (408, gateway); `headers` = the headers did not arrive within "
    "DIALSCORE_HEADER_TIMEOUT_S (408, front door); `idle` = a new connection sent nothing within "
    "it (closed, front door); `connections` = a connection beyond DIALSCORE_MAX_CONNECTIONS (503, "
    "front door). The front door is the embedded default's (gateway/front_door.py); on a cluster "
    "the ingress in front of Serve enforces these and counts them itself.", ["kind"])
WORK_IN_FLIGHT = Metric(
    "gauge", "dialscore_work_in_flight",
    "Work admitted on a model replica and not yet computed or dropped, in `unit` (pairs).",
    ["model", "unit"])
WORK_ADMITTED = Metric("counter", "dialscore_work_admitted_total",
                       "Work admitted on a model replica (validated, cut into chunks), in `unit`; "
                       "admitted = done + abandoned + in flight.", ["model", "unit"])
WORK_DONE = Metric("counter", "dialscore_work_done_total",
                   "Work computed on a model replica for a request still waiting, in `unit`.",
                   ["model", "unit"])
WORK_ABANDONED = Metric(
    "counter", "dialscore_work_abandoned_total",
    "Work dropped on a model replica because its request was cancelled (client gone or deadline "
    "passed), in `unit`: `dropped` was never computed, `wasted` was computed for nobody (the "
    "chunk that was running when the request was cancelled).", ["model", "unit", "kind"])

WORK_SECONDS = Metric(
    "counter", "dialscore_work_seconds_total",
    "Engine time of a model replica, in seconds: `busy` all of it, `wasted` the part spent on "
    "requests cancelled before their answer (client gone or deadline passed), `orphan` the part "
    "of that computed after the cancel, for nobody.", ["model", "kind"])

LANE_WAITING = Metric(
    "gauge", "dialscore_lane_waiting_work",
    "Work waiting for an engine call on a model replica, by priority lane, in `unit` (the chunks "
    "queued now).", ["model", "unit", "lane"])
LANE_WORK = Metric(
    "counter", "dialscore_lane_work_served_total",
    "Work a model replica's engine calls took, by priority lane, in `unit`.",
    ["model", "unit", "lane"])
LANE_LATENCY = Metric(
    "histogram", "dialscore_lane_latency_seconds",
    "Time of a request on a model replica (admission, queue and engine calls), by the priority "
    "lane it was served in.", ["model", "lane"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))

ENGINE_YIELD_SECONDS = Metric(
    "counter", "dialscore_engine_yield_seconds_total",
    "Seconds a yielding model replica (a bulk pool with `yield_to_interactive_s`) held its engine "
    "calls back while interactive requests were in replicas on the same device of its node.",
    ["model"])

#: Every metric, for the dashboard test and documentation.
ALL: tuple[Metric, ...] = (REQUESTS, ERRORS, LATENCY, ITEMS, TOKENS, BATCH_SIZE, BATCH_REQUESTS,
                           BATCH_TOKENS, PADDING_WASTE, REUSED_TOKENS, CONTEXT_CACHE_LOOKUPS,
                           CONTEXT_CACHE_TOKENS, CONTEXT_CACHE_BYTES, CONTEXT_CACHE_EVICTIONS,
                           IN_FLIGHT, SLOW_CLIENTS, WORK_IN_FLIGHT,
                           WORK_ADMITTED, WORK_DONE, WORK_ABANDONED, WORK_SECONDS, LANE_WAITING,
                           LANE_WORK, LANE_LATENCY, ENGINE_YIELD_SECONDS)
