"""Every use of another project's private or undocumented API, and nothing else.

The service relies on public APIs everywhere else. Each entry below says what it relies on, why no
public API does the job, and what the service does when the entry is gone. ``tests/test_compat.py``
holds one test per entry; each fails naming the entry (``compat entry 'replica_accepted': ...``)
when an upgrade of Ray, torch or transformers changes what the entry relies on, so the break shows
in CI rather than in a user's cluster.

========================  ============  ======================================================
entry                     project       relies on
========================  ============  ======================================================
replica_accepted          Ray Serve     ``DeploymentResponse._fetch_future_result_async``
onednn_linear             torch         ``torch.ops.mkldnn._linear_pointwise`` (attr ``none``,
                                        and ``gelu`` with algorithm ``tanh``)
quantized_linear_prepack  torch         ``torch.ops.quantized.linear_prepack``
quantized_linear_dynamic  torch         ``torch.ops.quantized.linear_dynamic``
prefix_cache_layer        transformers  subclassing ``cache_utils.DynamicLayer``: its fields
                                        ``keys``, ``values``, ``is_initialized``, ``dtype``,
                                        ``device`` and its ``update`` contract
session_logs_dir          Ray           ``ray._private.worker._global_node.get_logs_dir_path``
                                        (the test suite's log audit only)
fake_head_node_id         Ray           ``ray.autoscaler._private.fake_multi_node``'s
                                        ``FAKE_HEAD_NODE_ID`` (the test suite's local cluster
                                        only)
serve_replicas            Ray Serve     ``ray.serve.context._get_global_client`` and its
                                        ``get_serve_details()`` (the test suite's local
                                        cluster only)
kill_gcs_server           Ray           ``ray._private.node.Node.kill_gcs_server`` and
                                        ``all_processes["gcs_server"]`` (the test suite's
                                        local cluster only)
start_gcs_server          Ray           ``ray._private.node.Node.start_gcs_server`` (the test
                                        suite's local cluster only)
cached_queue_len          Ray Serve     ``RequestRouter.replica_queue_len_cache`` (public) and
                                        its ``get(replica_id)`` (undocumented)
request_backoff           Ray Serve     ``PendingRequest.routing_context.should_backoff``
ray_start_timed_out       Ray           the message of the bare ``Exception`` that
                                        ``ray._private.node.Node`` raises when its raylet does
                                        not register within its fixed wait
========================  ============  ======================================================

Nothing here imports torch, transformers or Ray at module level: the gateway imports this module
too.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

#: The entries of this module, for the guard tests.
ENTRIES = ("replica_accepted", "onednn_linear", "quantized_linear_prepack",
           "quantized_linear_dynamic", "prefix_cache_layer", "session_logs_dir",
           "fake_head_node_id", "kill_gcs_server", "start_gcs_server", "cached_queue_len",
           "request_backoff", "ray_start_timed_out", "serve_replicas")


def replica_accepted(response: Any) -> Awaitable[Any] | None:
    """An awaitable that resolves once a replica has accepted `response` (a Serve
    ``DeploymentResponse``), or None when this Ray has no such hook.

    Why: the gateway answers 503 when no replica accepts a request within ``queue_timeout_s``
    (all busy, or a crashed replica being replaced), separately from the request's own deadline.
    Ray Serve's public API offers only the whole answer (``await response``), not the moment of
    assignment. Ray 2.60's ``DeploymentResponse._fetch_future_result_async`` resolves at that
    moment. Without it, the request's single deadline applies (no separate queue deadline)."""
    fetch = getattr(response, "_fetch_future_result_async", None)
    return fetch() if fetch is not None else None


# ------------------------------------------------------------------------------ onednn_linear
def onednn_linear_available() -> bool:
    """Whether this torch build has the op behind :func:`onednn_linear` (part of that entry)."""
    import torch

    return bool(torch.backends.mkldnn.is_available()
                and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


def onednn_linear(x: Any, weight: Any, bias: Any, *, gelu: bool = False) -> Any:
    """``x @ weight.T + bias`` through oneDNN's inner-product primitive, followed by the tanh
    approximation of GELU when `gelu` (fused into the product's epilogue).

    `x`: ``[rows, in]``; `weight`: ``[out, in]`` (a transposed view of a column-major ``[in, out]``
    matrix is read without a copy); `bias`: ``[out]`` or None. float32 or bfloat16 CPU tensors,
    outside autograd (the op has no backward). Raises RuntimeError where oneDNN cannot build the
    primitive (bfloat16 on a CPU without native bfloat16 instructions).

    Relies on ``torch.ops.mkldnn._linear_pointwise(x, weight, bias, attr, scalars, algorithm)``
    with ``attr`` ``"none"`` or ``"gelu"`` and ``algorithm`` ``""`` or ``"tanh"``: the op
    torch's Inductor emits for CPU linear layers. Why: torch's public float32 ``linear``/``addmm``
    go through its BLAS (MKL on x86) and offer no way to pick oneDNN or to fuse an activation into
    the product; ``torch.backends.mkldnn`` switches only whether convolution-like ops may use it.
    Without it, :mod:`dialscore_server.nll.engine.kernels` routes nothing through oneDNN (every
    layer keeps PyTorch's own product; numbers change only by float rounding)."""
    import torch

    attr, algorithm = ("gelu", "tanh") if gelu else ("none", "")
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, attr, [], algorithm)


# ----------------------------------------------------------------------------- int8 products
def quantized_linear_prepack(weight: Any) -> Any:
    """`weight` (a ``qint8`` tensor ``[out, in]``, quantized per output channel) packed for the
    quantized engine selected in ``torch.backends.quantized.engine``, without a bias; the object
    :func:`quantized_linear_dynamic` multiplies by.

    Relies on ``torch.ops.quantized.linear_prepack(qweight, bias)``. Why: torch's only public
    route to these int8 kernels is ``torch.ao.quantization.quantize_dynamic``, which builds its own
    layers with one activation scale per input tensor, so a row's rounding would depend on the
    other rows of its batch (see :mod:`dialscore_server.checkpoints.quantize`). Without it, a model
    registered with ``dtype: int8`` cannot load (float32 and bfloat16 are unaffected)."""
    import torch

    return torch.ops.quantized.linear_prepack(weight, None)


def quantized_linear_dynamic(x: Any, packed: Any) -> Any:
    """float32 ``x @ W.T`` (`x` ``[rows, in]`` float32, `packed` from
    :func:`quantized_linear_prepack`): `x` is quantized to unsigned 7-bit codes over the whole
    tensor's [min, max] (``reduce_range``), multiplied by the int8 weights with int32
    accumulation, and scaled back to float32.

    Relies on ``torch.ops.quantized.linear_dynamic(x, packed, reduce_range)`` and on its one
    activation range per tensor: a row's result depends on the other rows only through that
    range, which :class:`~dialscore_server.checkpoints.quantize.Int8Linear` pins with an anchor
    row. Why and without it: as :func:`quantized_linear_prepack`."""
    import torch

    return torch.ops.quantized.linear_dynamic(x, packed, True)


# ------------------------------------------------------------------------- prefix_cache_layer
# Built on first use: subclassing transformers' DynamicLayer at import time would import
# transformers with this module.
_PREFIX_LAYER: Any = None


def prefix_cache_layer(keys: Any, values: Any, index: Any) -> Any:
    """One layer of a transformers ``Cache`` (``Cache(layers=[...])``) that holds a prefix's
    keys/values (``[groups, heads, prefix, head_dim]``) and, on each ``update``, returns row ``b``
    the prefix of group ``index[b]`` followed by the new keys/values. The expansion is made inside
    ``update``, so only the layer running holds an expanded copy; the layer never stores what it
    is given (one forward pass per cache object).

    Relies on transformers' ``cache_utils.DynamicLayer``: constructible without arguments; the
    fields ``keys``, ``values``, ``dtype``, ``device`` and ``is_initialized`` through which
    ``Cache`` and the models read a layer (``get_seq_length``, ``get_mask_sizes``); and ``update``
    returning the keys/values attention runs on. Why: the public alternative, a ``DynamicCache``
    filled with the expanded prefix of every layer, holds all layers' expansions for the whole
    pass (the number of layers times the memory of this one). Without it, shared-prefix reuse of
    decoder-only models cannot run (``serving.prefix_reuse: false`` still scores every item)."""
    global _PREFIX_LAYER
    if _PREFIX_LAYER is None:
        from transformers.cache_utils import DynamicLayer

        class ExpandedPrefixLayer(DynamicLayer):
            def __init__(self, keys: Any, values: Any, index: Any):
                super().__init__()
                self.keys, self.values, self.index = keys, values, index
                self.dtype, self.device = keys.dtype, keys.device
                self.is_initialized = True

            def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any
                       ) -> tuple[Any, Any]:
                import torch

                return (torch.cat([self.keys.index_select(0, self.index), key_states], dim=-2),
                        torch.cat([self.values.index_select(0, self.index), value_states], dim=-2))

        _PREFIX_LAYER = ExpandedPrefixLayer
    return _PREFIX_LAYER(keys, values, index)


def session_logs_dir() -> str:
    """The log folder of the Ray session this process is connected to (every worker's, replica's
    and Serve's log files are under it).

    Why: the test suite audits every log file of its session for request bodies; Ray's public API
    does not say where a session's logs are when ``ray.init`` started the session (the path
    holds its start time). Ray's own ``_global_node.get_logs_dir_path()`` does. Without it, that
    audit cannot find the files (the service itself never needs it)."""
    import ray._private.worker as worker

    return str(worker._global_node.get_logs_dir_path())


def fake_head_node_id() -> str:
    """The node id Ray's fake multi-node autoscaler provider gives the head node it manages.

    Why: the test suite's local autoscaling cluster (``tests/cluster/localcluster.py``) starts its
    own head raylet and must give it this id (through ``RAY_OVERRIDE_NODE_ID_FOR_TESTING``) so that
    the provider recognises it; Ray documents the ``fake_multinode`` provider but not the id,
    which lives in ``ray.autoscaler._private``. Without it the fake autoscaler never adds a
    node (the service itself never needs it)."""
    from ray.autoscaler._private.fake_multi_node.node_provider import FAKE_HEAD_NODE_ID

    return str(FAKE_HEAD_NODE_ID)


def serve_replicas() -> list[dict[str, Any]]:
    """Every replica of every Serve application on the connected Ray, one dict each: its
    ``app``, ``deployment``, ``replica_id``, ``state`` (``RUNNING``, ``STARTING``...),
    ``node_id``, ``actor_name`` and ``pid`` (None where Serve does not know them yet).

    Why: the test suite's local cluster (``tests/cluster/localcluster.py``) finds the replica to
    kill, its node and its process. Serve publishes these details only through the dashboard's
    REST API (``GET /api/serve/applications/``), and that cluster runs without a dashboard; the
    public ``serve.status()`` counts replicas without naming them. Serve's controller client
    (``_get_global_client().get_serve_details()``) returns the REST API's document. Without it,
    the cluster tests cannot pick a replica (the service itself never needs it)."""
    from ray.serve.context import _get_global_client

    details = _get_global_client().get_serve_details()
    return [{"app": app, "deployment": name, "replica_id": r["replica_id"],
             "state": str(r["state"]).rsplit(".", 1)[-1], "node_id": r.get("node_id"),
             "actor_name": r.get("actor_name"), "pid": r.get("pid")}
            for app, application in details.get("applications", {}).items()
            for name, deployment in application["deployments"].items()
            for r in deployment.get("replicas", [])]


def kill_gcs_server(head_node: Any) -> int:
    """SIGKILL the GCS server of `head_node` (a ``ray.cluster_utils.Cluster``'s ``head_node``),
    wait until it is gone and return its process id.

    Why: the test suite's local cluster (``tests/cluster/localcluster.py``) takes its head's GCS
    away to test GCS fault tolerance. Ray starts the GCS inside its head node object and offers no
    public way to find or stop that one process (``ray stop`` ends every Ray on the machine);
    ``Node.kill_gcs_server`` kills exactly the one this cluster started, and the node then knows it
    is gone (:func:`start_gcs_server` can start it again). Without it that test cannot run (the
    service itself never needs it)."""
    from ray._private import ray_constants

    (info,) = head_node.all_processes[ray_constants.PROCESS_TYPE_GCS_SERVER]
    pid = int(info.process.pid)
    head_node.kill_gcs_server()
    return pid


def start_gcs_server(head_node: Any) -> int:
    """Start `head_node`'s GCS server again, on its port, with its session and external storage
    (Redis), as KubeRay's restarted head pod does; return the new process id.

    Why: as :func:`kill_gcs_server`; ``Node.start_gcs_server`` is what Ray's own GCS fault
    tolerance tests use. Without it that test cannot run."""
    from ray._private import ray_constants

    head_node.start_gcs_server()
    (info,) = head_node.all_processes[ray_constants.PROCESS_TYPE_GCS_SERVER]
    return int(info.process.pid)


# --------------------------------------------------------------------- context-affinity router
def cached_queue_len(router: Any, replica_id: Any) -> int | None:
    """The queue length of the replica `replica_id` in the queue-length cache of `router` (a
    ``ray.serve.request_router.RequestRouter``), or None when it has no fresh entry or this Ray
    has no such cache.

    Why: the context-affinity router
    (:class:`~dialscore_server.scheduling.context_affinity.ContextAffinityRouter`) decides whether
    a request's owner is busy before it ranks the replicas. Serve keeps each handle's view of every
    replica's ongoing requests in that cache (one more per request sent, one less per request
    finished, refreshed by probes, forgotten after ``RAY_SERVE_QUEUE_LENGTH_CACHE_TIMEOUT_S``);
    ``replica_queue_len_cache`` is a documented attribute of the public ``RequestRouter``, but the
    cache's own ``get`` is not documented (``ray.serve.llm``'s prefix-aware router reads the same
    cache). Without it the router probes the owner for every request (public
    ``RunningReplica.get_queue_len``): one more round trip per request, same decisions."""
    cache = getattr(router, "replica_queue_len_cache", None)
    get = getattr(cache, "get", None)
    if get is None:
        return None
    value = get(replica_id)
    return value if isinstance(value, int) else None


def request_backoff(pending_request: Any) -> bool:
    """Ask Serve to back off before routing `pending_request` (a
    ``ray.serve.request_router.PendingRequest``) again when no replica it was offered took it;
    whether this Ray has the switch.

    Why: Serve's routing loop calls ``choose_replicas`` again at once, without its backoff, unless
    the request's ``routing_context.should_backoff`` is set; Serve's own locality mixin sets it
    once it offers every replica. A router without that mixin (the context-affinity router: an
    owner on another node is still the owner) sets it itself, or a request that finds every
    replica full is offered to them again in a tight loop of queue-length probes. The attribute
    is documented only as "context for request routing". Without it such a request retries
    without backoff (correct, but it probes the full replicas continuously)."""
    context = getattr(pending_request, "routing_context", None)
    if context is None or not hasattr(context, "should_backoff"):
        return False
    context.should_backoff = True
    return True


# --------------------------------------------------------------------- the embedded local Ray
#: The start of the message Ray's node raises when its raylet did not register in time.
RAY_START_TIMEOUT_MESSAGE = "The current node timed out during startup"


def ray_start_timed_out(error: BaseException) -> bool:
    """Whether `error`, raised by ``ray.init`` starting a local Ray, is Ray's node startup timing
    out (its raylet did not register with the GCS within Ray's fixed 30 s wait).

    Why: the embedded default starts Ray again when that happens on a busy machine
    (gateway/local_ray.py). Ray raises a bare ``Exception`` for it, with no type or attribute of
    its own, so only its message tells it from a configuration error, which must not be
    retried. Without it (the message changed), a timed-out start fails at once, as ``ray.init``
    itself does."""
    return type(error) is Exception and str(error).startswith(RAY_START_TIMEOUT_MESSAGE)
