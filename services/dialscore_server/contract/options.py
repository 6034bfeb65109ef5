"""Serving options of one model deployment (the ``serving:`` block of a Serve YAML model entry)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: A CPU priority (``engine_priority``, ``ingress_priority``; applied by
#: :mod:`dialscore_server.scheduling.cpu_priority`). ``normal``: the process's own (Ray starts
#: workers at nice 15). ``low``: nice 19, the lowest a nice value goes. ``idle``: Linux's
#: ``SCHED_IDLE`` policy, below every nice value (a weight of 3 against nice 0's 1024 and nice
#: 19's 15).
CpuPriority = Literal["normal", "low", "idle"]

#: Default of ``bulk_every``: while both lanes wait, one engine call in this many starts with
#: the oldest bulk chunk (:class:`dialscore_server.scheduling.lanes.LanePolicy`).
BULK_EVERY = 4


class ServingOptions(BaseModel):
    """How one model is served: replicas, resources, batching, backpressure, engine settings.

    The one typed object that travels from the Serve YAML (``serving:`` of a model entry) through
    ``build_app`` to the model deployment, which takes its Serve options from it and hands it,
    whole, to its engine's ``from_options``.
    """

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    engine: str | None = Field(
        None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="Import path (`package.module:Class`) of the engine class to serve the model "
        "with, importable on every node; it must implement the engine protocol "
        "(dialscore_server.contract.engine) and the endpoint's operations. Default: the family's "
        "engine (NLLEngine, ContradictionDetector). Tests serve fake engines this way.")
    num_replicas: int | Literal["auto"] = Field(1, description="Fixed replica count, or `auto`.")
    autoscaling_config: dict[str, Any] | None = Field(
        None, description="Serve autoscaling_config (min_replicas, max_replicas, "
        "target_ongoing_requests, upscale_delay_s, downscale_delay_s...). Overrides num_replicas.")
    num_cpus: float = Field(0.5, gt=0, description="CPUs per replica (fractional fits 2 cores).")
    num_gpus: float = Field(0, ge=0, description="GPUs per replica.")
    max_ongoing_requests: int = Field(
        64, ge=1, description="Requests a replica holds at once. Must exceed the number of requests "
        "a batch merges: Serve's default of 5 caps batches at 5 requests.")
    max_queued_requests: int = Field(
        256, ge=-1, description="Requests waiting for a replica before the gateway sheds with 503 "
        "(-1: unbounded).")
    max_batch_tokens: int = Field(
        8192, ge=1, le=16384, description="NLL models: positions the engine computes (a source "
        "repeated by consecutive items counted once), merged from many requests into one engine "
        "call.")
    batch_wait_timeout_s: float = Field(0.005, ge=0, le=1,
                                        description="How long a batch waits to fill.")
    chunk_tokens: int = Field(
        2048, ge=1, description="NLL models: a request is computed in chunks of about this many "
        "computed positions (whole items; a source repeated by consecutive items counted once, "
        "as prefix reuse computes it once; a context's items kept together where possible), one "
        "chunk per request in each engine call, so requests share the replica round-robin and a "
        "small one never waits behind all of a large one; a cancelled or timed-out request's "
        "remaining chunks are dropped. Capped at max_batch_tokens.")
    chunk_pairs: int = Field(
        64, ge=1, description="Classifiers: a request is computed in chunks of about this many NLI "
        "pairs (whole dialogues), one chunk per request in each engine call, so requests share the "
        "replica round-robin and a small one never waits behind all of a large one; a cancelled or "
        "timed-out request's remaining chunks are dropped. 64 keeps a small request's wait near one chunk "
        "on CPU (loadtests/bench_fairness.py); on a GPU larger chunks use it better.")
    token_budget: int | None = Field(
        None, ge=16, description="Padded tokens per forward pass. Default: NLL models 4096 on GPU and, "
        "on CPU, 2^20 / model width within 1024-16384 (cache-friendlier passes, measured faster); "
        "NLI classifiers 4096.")
    num_threads: int | None = Field(None, ge=1, description="torch threads (default: the replica's CPUs).")
    prefix_reuse: bool = Field(
        True, description="NLL models: compute shared work once per engine call (decoder-only: a "
        "shared token prefix and its key/value cache; encoder-decoder: each distinct source). Same "
        "numbers either way; off only to measure it.")
    context_cache_bytes: int | None = Field(
        None, ge=0, description="Decoder-only NLL models with prefix_reuse: bytes of key/value "
        "states of recently computed contexts each replica keeps across requests (least recently "
        "used evicted first; never a target position), so a context sent again (the next bot "
        "turn's rerank, lm-eval's next answer option) is computed only where it is new. Same "
        "numbers either way. Default: a sixteenth of the replica's device memory (GPU) or of the "
        "machine's memory (CPU). 0: off.")
    fast_kernels: bool = Field(
        True, description="NLL models: run float32 linear layers through oneDNN where it measures "
        "faster than PyTorch's own route for the layer's shape (timed once per machine and shared "
        "by every replica on it, in $DIALSCORE_CACHE_DIR/kernel-routes.json), and GPT-2's GELU as "
        "one fused kernel (services/dialscore_server/nll/engine/kernels.py; same numbers to float "
        "rounding). Off: stock PyTorch kernels.")
    cuda_graph_positions: int = Field(
        512, ge=0, description="Decoder-only NLL models on a GPU: capture the model's plain "
        "passes (no key/value states kept) as CUDA graphs at start, for every (rows, width) "
        "bucket of powers of two from 16 positions wide with at most this many positions, and "
        "replay them for the passes they hold (padded to the bucket), so a small engine call "
        "launches its kernels at once instead of one by one from Python "
        "(services/dialscore_server/nll/engine/cuda_graphs.py). Same numbers to float rounding. "
        "Costs each bucket's activations in GPU memory (one shared pool) and a few passes per "
        "bucket at start. 0: off. Ignored on CPU and for seq2seq models.")
    priority_lanes: bool = Field(
        True, description="Serve interactive requests' chunks before bulk ones on each engine call "
        "(bulk keeps a bounded share: `bulk_every`). Off: every request the same share, first "
        "come first served (only to measure it).")
    bulk_every: int = Field(
        BULK_EVERY, ge=1, description="While interactive and bulk chunks both wait, at least one "
        "engine call in every `bulk_every` serves a bulk chunk (bulk is never starved; with no "
        "interactive chunk waiting it has every call).")
    interactive_max_cost: int | None = Field(
        None, ge=0, description="A request costing more than this, in the model's unit of work "
        "(NLL models: its tokens, sources and targets; classifiers: NLI pairs), is served in the "
        "bulk lane whatever it asks (header X-Dialscore-Priority or body `priority`), so bulk work "
        "cannot claim the interactive lane by asking. Default: one chunk (`chunk_tokens` or "
        "`chunk_pairs`). 0: every request is bulk.")

    bulk_max_batch: int | None = Field(
        None, ge=1, description="With priority lanes on, an engine call of bulk chunks merges at "
        "most this much (NLL models: computed positions; classifiers: NLI pairs), so an "
        "interactive request arriving while it runs waits for less. NLL models cut a bulk "
        "request into chunks of at most this many positions (whole items) where it is below "
        "chunk_tokens, so every bulk call stays within it; a classifier's chunk of chunk_pairs "
        "larger than it is a call of its own. Default: the engine call's whole budget "
        "(max_batch_tokens on NLL models).")
    bulk_max_batch_hold_s: float | None = Field(
        2.0, ge=0, description="With bulk_max_batch set, it bounds a bulk "
        "engine call only while an interactive chunk waits or arrived on the replica within the "
        "last this many seconds; with no interactive traffic for longer, bulk calls merge up to "
        "the whole budget (one chunk of every waiting bulk request), so the bound costs bulk "
        "throughput only while it shortens interactive waits. The first interactive request "
        "after a quiet spell may wait for one such call. A yielding bulk pool "
        "(`yield_to_interactive_s`) counts from the last interactive request on its device "
        "instead (the device gate's record). null: the bound always holds.")
    affinity_routing: bool = Field(
        True, description="NLL models: callers route requests whose contexts start alike (the "
        "first 256 characters of the first item's knowledge and turns or source, or of a "
        "completion's first prompt) to the same replica, its owner by rendezvous hashing over the "
        "live replicas, so that the replica's context cache serves them; a request whose owner "
        "holds more than `affinity_max_owner_queue` requests, or that has no context, goes to the "
        "less loaded of two other replicas "
        "(services/dialscore_server/scheduling/context_affinity.py). Off: Serve's default router "
        "(power of two choices). Classifiers ignore it.")
    affinity_max_owner_queue: int = Field(
        8, ge=0, description="NLL models with affinity routing: the most requests (running or "
        "queued, as the caller's router counts them) a context's owner may hold and still be "
        "given another of that context; beyond it the request goes to a less loaded replica and "
        "computes its context afresh.")
    engine_stall_s: float | None = Field(
        600.0, gt=0, description="An engine call that shows no progress for longer than this "
        "many seconds (it begins no forward pass and no layer of its model) fails the replica's "
        "health check, so that Serve replaces a replica whose engine hangs (a lost device, a "
        "deadlock) instead of reading it as healthy while every request to it times out. A long "
        "call that keeps progressing passes, however long it takes. A whole engine call of "
        "16,384 positions at DialoGPT-medium's width takes about a minute on 2 CPU cores, one of "
        "its layers a few seconds, so the default leaves a wide margin even for an engine at "
        "`idle` priority on a busy node; lower it on GPUs to replace a hung replica sooner. "
        "null: never (an engine call at work always passes the check).")
    health_check_period_s: float = Field(
        10.0, gt=0, le=600, description="How often Serve runs each replica's health check "
        "(Serve's `health_check_period_s`; its default, 10 s): the engine's tiny real pass when "
        "the engine is idle, the `engine_stall_s` bound while a call is at work. Serve replaces a "
        "replica after three failed checks in a row, so a replica whose engine call hangs is "
        "replaced about `engine_stall_s` + 3 x this after the call began. Lower it with "
        "`engine_stall_s` to replace hung replicas sooner; each check of an idle replica costs "
        "one tiny engine pass.")
    engine_priority: CpuPriority = Field(
        "normal", description="The CPU priority of the replica's engine calls, on Linux: the "
        "thread that runs them and PyTorch's CPU threads it starts. `normal`: the replica "
        "process's own (Ray starts workers at nice 15). `low`: nice 19. `idle`: Linux's "
        "SCHED_IDLE policy, below every nice value: the engine computes on CPU time other "
        "processes on the node leave, and still progresses when they want it all (a small "
        "share, never none). For a model's bulk pool (`bulk_pool`), so that bulk work yields "
        "the node's cores to the interactive replicas, the proxy and the gateway; a replica "
        "serving interactive requests keeps `normal`. It is never raised again (raising it "
        "needs privileges), does not change GPU scheduling, and is ignored off Linux.")
    yield_to_interactive_s: float | None = Field(
        None, gt=0, description="For a model's bulk pool (`bulk_pool`): before each engine call, "
        "wait while an interactive request is in another replica on the same device of this "
        "node (the node's cores, or the same GPU), from its admission to its answer, for at most "
        "this many seconds; then the call runs anyway, so bulk work always progresses (at least "
        "one call per this many seconds while interactive requests follow each other with no "
        "gap). With `yield_inside_calls`, a running call also pauses between its forward passes "
        "and its model's layers while one is there, the call's waits together within the same "
        "bound. Keep bulk calls short with `bulk_max_batch` (held for `bulk_max_batch_hold_s` "
        "after an interactive request left the device). Every replica's interactive requests "
        "mark the device busy while they are there, their wait for the engine included (a file "
        "lock in /dev/shm shared by the processes of the node or pod; "
        "services/dialscore_server/scheduling/device_gate.py). Works on GPUs too, where CPU "
        "priority (`engine_priority`) does nothing. Below `engine_stall_s`, since a waiting call "
        "shows no progress. null: never wait.")
    yield_inside_calls: bool = Field(
        True, description="With `yield_to_interactive_s`: a running engine call also pauses "
        "between its forward passes and before each layer of its model while an interactive "
        "request is on the device (services/dialscore_server/scheduling/pause_points.py), within "
        "the call's `yield_to_interactive_s`; a paused call keeps its memory. A pass replayed "
        "from a CUDA graph pauses between passes only. false: only before each call.")

    @model_validator(mode="after")
    def _yield_within_stall_bound(self) -> ServingOptions:
        """A call's waits for interactive work last up to `yield_to_interactive_s` without
        progress: at or beyond `engine_stall_s`, a waiting pool would be taken for a hung one."""
        if (self.yield_to_interactive_s is not None and self.engine_stall_s is not None
                and self.yield_to_interactive_s >= self.engine_stall_s):
            raise ValueError(
                f"yield_to_interactive_s ({self.yield_to_interactive_s:g} s) must be below "
                f"engine_stall_s ({self.engine_stall_s:g} s): an engine call waiting that long "
                "for interactive work would fail the health check as hung")
        return self
