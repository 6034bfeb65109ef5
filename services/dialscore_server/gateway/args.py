"""The application's arguments: what a Serve config YAML puts under `args:` for `build_app`.

Serve validates the YAML's `args` against :class:`AppArgs` (the builder's sole argument is this
pydantic model), so a typo in a deployment config fails at `serve run`/`serve deploy` time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dialscore_server.checkpoints.registry import ModelConfig, Registry, paper_registry, stand_in_registry
from dialscore_server.contract.limits import Limits
from dialscore_server.contract.options import CpuPriority, ServingOptions


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class ModelEntry(_Args):
    """One served model: a registry name, optional overrides of its config, serving options."""

    name: str = Field(description="A registry name (see services/dialscore_server/checkpoints/registry.py).")
    serve_as: str | None = Field(
        None, pattern=r"^[A-Za-z0-9._\-]+$",
        description="Serve under this name instead (e.g. one checkpoint in two dtypes).")
    overrides: dict[str, Any] = Field(default_factory=dict,
                                      description="ModelConfig fields to override (source, dtype...).")
    serving: ServingOptions = Field(default_factory=ServingOptions)
    bulk_pool: ServingOptions | None = Field(
        None, description="Dialogue (NLL) models: serving options of the model's bulk pool, a "
        "deployment of its own (`bulk-nll-<name>`) of the same checkpoint that serves every "
        "request asking for the bulk lane (header X-Dialscore-Priority: bulk or body `priority` "
        "> 0, as the client's probe and evaluation runs send), so that bulk work never queues on "
        "the replicas interactive requests use. Give it `engine_priority: idle` (or `low`) so "
        "that it also yields their CPU on shared nodes. Requests not asking for bulk stay on "
        "`serving`'s replicas, in the bulk lane there when over `interactive_max_cost`. Same "
        "numbers on either. null: no pool; bulk shares the replicas, served after interactive "
        "work (priority lanes).")

    @property
    def served_name(self) -> str:
        """The name the model is served under: `serve_as`, else its registry name."""
        return self.serve_as or self.name


class AppArgs(_Args):
    """Arguments of the whole application (gateway + one deployment per model)."""

    stand_ins: str | None = Field(
        None, description="Folder of stand-in checkpoints: when set, registry names resolve to the "
        "offline stand-ins there (built if missing) instead of hub ids.")
    models: list[ModelEntry] = Field(min_length=1, description="The dialogue (NLL) models to serve.")
    classifiers: list[ModelEntry] = Field(
        default_factory=list, description="NLI classifiers for /v1/contradiction and reranking; the "
        "first is the default detector. The rerank routes exist when at least one is served.")
    rerank_num_cpus: float = Field(0.1, gt=0, description="CPUs of the (model-less) rerank deployment.")
    limits: Limits = Field(default_factory=Limits)
    request_timeout_s: float = Field(60.0, gt=0, description="Deadline of one request; then 408.")
    deadline_timer: str | None = Field(
        None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="Import path (`package.module:function`, importable where the gateway runs) "
        "of an async function(seconds) that returns once a request's deadline "
        "(request_timeout_s) has passed; it then times the whole request, and queue_timeout_s "
        "is not used. Default: the event loop's clock. Tests pass one whose deadlines pass when "
        "they say, as they serve fake engines (`engine`).")
    body_timeout_s: float = Field(
        10.0, gt=0, description="Longest a gateway waits for a request's whole body once the "
        "request reached it (a client trickling bytes); then 408 `timeout`, counted in "
        "dialscore_slow_clients_total{kind=\"body\"}.")
    queue_timeout_s: float | None = Field(
        10.0, gt=0, description="Longest a request waits for a model replica to accept it (queued "
        "behind others, or while a crashed replica is being replaced); then 503 `overloaded` with "
        "Retry-After, so callers back off instead of holding connections. null: wait until "
        "request_timeout_s.")
    gateway_num_cpus: float = Field(0.1, gt=0)
    gateway_replicas: int = Field(1, ge=1)
    gateway_max_replicas_per_node: int | None = Field(
        None, ge=1, description="At most this many gateway replicas on one Ray node (Serve's "
        "max_replicas_per_node): 1 spreads them, so losing a node loses one gateway, not all.")
    gateway_max_ongoing_requests: int = Field(
        256, ge=1, description="Requests one gateway replica works on at once (most of them are "
        "waiting on a model).")
    gateway_max_queued_requests: int = Field(
        256, ge=-1, description="Requests Serve's proxy queues for the gateway beyond those; then the "
        "proxy itself answers 503 with Retry-After 1 (a plain-text body: no gateway code runs). "
        "Bounds latency when the gateway, not a model, is the bottleneck. -1: unbounded.")
    auth_token_env: str = Field(
        "DIALSCORE_API_TOKEN", description="Env var holding the bearer token (or `file:PATH` of a file "
        "holding it), read by each gateway replica from the environment of the node it runs on; "
        "auth is off when it is unset, unless auth_required.")
    allowed_hosts: list[str] | None = Field(
        None, description="While auth is off, the Host names or addresses requests may carry "
        "besides loopback ones (localhost, *.localhost, 127.0.0.0/8, [::1]); `*` allows any. Other "
        "requests get 403 `host_not_allowed` (a guard against DNS rebinding; "
        "contract/host_check.py). null: no Host check, the default of a Serve config (a cluster's "
        "ingress decides which names reach it); the embedded default (`dialscore serve`/`demo`) "
        "checks, with the list from --allowed-hosts, DIALSCORE_ALLOWED_HOSTS or this field, in "
        "that order.")
    auth_required: bool = Field(
        False, description="Fail closed: a gateway replica whose node has no token refuses to start "
        "(the deployment fails instead of serving the API without auth). On in cluster.yaml.")

    @model_validator(mode="after")
    def _unique(self) -> "AppArgs":
        names = [m.served_name for m in self.models + self.classifiers]
        if len(set(names)) != len(names):
            raise ValueError(f"models: duplicate names in {names}")
        pooled = [m.served_name for m in self.classifiers if m.bulk_pool is not None]
        if pooled:
            raise ValueError(f"classifiers: bulk_pool is for dialogue (NLL) models only; "
                             f"set on {pooled}")
        return self

    def registry(self) -> Registry:
        if self.stand_ins:
            from dialscore_server.checkpoints.standins import build_stand_ins

            # Resolved here, in the process that builds the app: replicas may run elsewhere.
            root = Path(self.stand_ins).expanduser().resolve()
            build_stand_ins(root)
            return stand_in_registry(root)
        return paper_registry()

    def model_configs(self, entries: list[ModelEntry] | None = None
                      ) -> list[tuple[ModelConfig, ServingOptions]]:
        """Resolved configs of `entries` (default: the NLL models), aliases and overrides applied."""
        registry = self.registry()
        out = []
        for entry in self.models if entries is None else entries:
            base = registry.get(entry.name)
            name = {"name": entry.serve_as} if entry.serve_as else {}
            cfg = ModelConfig.model_validate({**base.model_dump(), **entry.overrides, **name})
            out.append((cfg, entry.serving))
        return out

    def batch_model_configs(self) -> list[tuple[ModelConfig, ServingOptions]]:
        """The dialogue models as a batch job (``dialscore batch``) scores them, a job being bulk
        work: each one's resolved config with its bulk pool's serving options where it has a
        pool, else its own."""
        return [(cfg, entry.bulk_pool or options)
                for entry, (cfg, options) in zip(self.models, self.model_configs())]

    def bulk_pools(self) -> list[tuple[ModelConfig, ServingOptions]]:
        """The dialogue models that have a bulk pool: each one's resolved config with its pool's
        serving options."""
        return [(cfg, entry.bulk_pool) for entry, (cfg, _) in zip(self.models, self.model_configs())
                if entry.bulk_pool is not None]

    def classifier_configs(self) -> list[tuple[ModelConfig, ServingOptions]]:
        out = self.model_configs(self.classifiers)
        for cfg, _ in out:
            if cfg.family != "classifier":
                raise ValueError(f"classifiers: {cfg.name!r} is a {cfg.family} model, not a classifier")
        return out


class BulkIngressArgs(AppArgs):
    """Arguments of a bulk ingress (``build_bulk_ingress``): a second Serve application, under a
    route prefix of its own, whose one deployment is a gateway that serves every request in the
    bulk lane, on the model deployments of the application `of_app` (built from the same
    AppArgs: give both the same `models`, `classifiers`, limits and auth, as a YAML anchor does).
    Its gateway runs at `ingress_priority`, a process of its own, so that reading, validating
    and answering bulk requests takes CPU only as the interactive path leaves it."""

    of_app: str = Field(
        "dialscore", min_length=1, description="The Serve application whose model deployments "
        "(`nll-<name>`, `bulk-nll-<name>`, `nli-<name>`, `rerank`) this ingress calls; it must "
        "be built from the same `models` and `classifiers`.")
    ingress_priority: CpuPriority = Field(
        "low", description="The CPU priority of the bulk ingress's gateway process, every thread "
        "of it, on Linux: `low` (nice 19), `idle` (SCHED_IDLE: only CPU time nothing else on "
        "the node wants) or `normal`. Never raised again; ignored off Linux.")
    of_app_wait_s: float = Field(
        600.0, gt=0, description="How long a bulk ingress replica waits at start for `of_app`'s "
        "deployments to exist (the two applications may be deployed together); then it fails "
        "to start, naming the deployment, and Serve tries again.")
