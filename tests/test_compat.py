"""One guard per entry of ``dialscore_server.compat``: each fails, naming the entry, when an upgrade
of the project it reaches into changes what the entry relies on. (What each entry does for the
service is tested where it is used; these tests check the foreign API itself.)"""

from __future__ import annotations

import inspect

import pytest

from dialscore_server import compat


def broken(entry: str, why: str) -> None:
    pytest.fail(f"compat entry {entry!r}: {why}", pytrace=False)


def test_every_entry_has_a_guard():
    guards = {name.removeprefix("test_entry_") for name in globals() if name.startswith("test_entry_")}
    assert guards == set(compat.ENTRIES)


def test_entry_replica_accepted():
    from ray.serve.handle import DeploymentResponse

    fetch = getattr(DeploymentResponse, "_fetch_future_result_async", None)
    if fetch is None:
        broken("replica_accepted", "DeploymentResponse._fetch_future_result_async is gone: the "
               "queue deadline (queue_timeout_s) no longer applies")
    if not inspect.iscoroutinefunction(fetch):
        broken("replica_accepted", "DeploymentResponse._fetch_future_result_async is no longer a "
               "coroutine function")
    if list(inspect.signature(fetch).parameters) != ["self"]:
        broken("replica_accepted", "DeploymentResponse._fetch_future_result_async takes "
               f"{list(inspect.signature(fetch).parameters)}, not (self)")

    class NoHook:
        pass

    assert compat.replica_accepted(NoHook()) is None


def _close(got, want, scale=None) -> bool:
    """Equal to float32 rounding: each element within 1e-5 of `scale` (default: its own magnitude)
    plus 1e-6 of the largest."""
    if got.shape != want.shape:
        return False
    scale = want.abs() if scale is None else scale
    return bool(((got - want).abs() <= 1e-5 * scale + 1e-6 * want.abs().max()).all())


def test_entry_onednn_linear():
    import torch

    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch build has no oneDNN: the kernels never route through it")
    if not compat.onednn_linear_available():
        broken("onednn_linear", "torch.ops.mkldnn._linear_pointwise is gone: no layer is routed "
               "through oneDNN")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 48, generator=gen)
    w = torch.randn(48, 32, generator=gen).t().contiguous().t().t()  # [out, in] view, column-major
    b = torch.randn(32, generator=gen)
    plain = torch.nn.functional.linear(x, w, b)
    with torch.inference_mode():
        try:
            cases = {
                "plain": (compat.onednn_linear(x, w, b), plain),
                "no bias": (compat.onednn_linear(x, w, None), plain - b),
                "gelu/tanh": (compat.onednn_linear(x, w, b, gelu=True),
                              torch.nn.functional.gelu(plain, approximate="tanh")),
            }
        except (RuntimeError, TypeError) as e:
            broken("onednn_linear", f"_linear_pointwise(x, w, b, attr, scalars, algorithm) fails: {e}")
    for case, (got, want) in cases.items():
        if not _close(got, want):
            broken("onednn_linear", f"_linear_pointwise ({case}) no longer computes x @ w.T + b"
                   + (" then the tanh approximation of GELU" if case == "gelu/tanh" else ""))


def _quantized_weight(torch, gen):
    """A per-channel int8 weight (engine onednn, as quantize_int8 sets it) whose channels' scales
    span six orders of magnitude, and its float value."""
    import warnings

    torch.backends.quantized.engine = "onednn"
    w = torch.randn(24, 40, generator=gen) * torch.logspace(-3, 3, 24)[:, None]
    scale = (w.abs().amax(dim=1) / 127).double()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        qw = torch.quantize_per_channel(w, scale, torch.zeros(24, dtype=torch.long), 0, torch.qint8)
    return qw, qw.dequantize()


def _anchored(torch, rows):
    """`rows` (within [-1, 1]) followed by the anchor row that pins the tensor's range to [-1, 1]."""
    anchor = torch.zeros(1, rows.shape[1])
    anchor[0, 0], anchor[0, 1] = 1.0, -1.0
    return torch.cat([rows, anchor])


def _codes(torch, x):
    """`x` rounded to the 7-bit codes of the anchored range [-1, 1]: multiples of 2/127."""
    return torch.round(x * 63.5) / 63.5


def _int8_product(torch, x, packed):
    """The rows of `x` (within [-1, 1]) through linear_dynamic with the anchor row, anchor dropped."""
    return compat.quantized_linear_dynamic(_anchored(torch, x), packed)[: x.shape[0]]


def test_entry_quantized_linear_prepack():
    import torch

    if "onednn" not in torch.backends.quantized.supported_engines:
        broken("quantized_linear_prepack", "the onednn quantized engine is gone from this torch")
    gen = torch.Generator().manual_seed(1)
    qw, w = _quantized_weight(torch, gen)
    x = _codes(torch, torch.rand(6, 40, generator=gen) * 1.98 - 0.99)  # exactly on codes
    try:
        got = _int8_product(torch, x, compat.quantized_linear_prepack(qw))
    except (RuntimeError, TypeError) as e:
        broken("quantized_linear_prepack", f"linear_prepack(qweight, None) fails: {e}")
    if not _close(got, x @ w.T, scale=w.abs().sum(dim=1)):
        broken("quantized_linear_prepack", "the packed weight no longer multiplies as its "
               "per-channel dequantized value")


def test_entry_quantized_linear_dynamic():
    import torch

    gen = torch.Generator().manual_seed(2)
    qw, w = _quantized_weight(torch, gen)
    packed = compat.quantized_linear_prepack(qw)
    rows = torch.rand(5, 40, generator=gen) * 2 - 1
    others = torch.rand(3, 40, generator=gen) * 2 - 1
    try:
        alone = _int8_product(torch, rows, packed)
        beside = _int8_product(torch, torch.cat([rows, others]), packed)
    except (RuntimeError, TypeError) as e:
        broken("quantized_linear_dynamic", f"linear_dynamic(x, packed, reduce_range) fails: {e}")
    if alone.dtype != torch.float32 or not _close(alone, _codes(torch, rows) @ w.T,
                                                   scale=w.abs().sum(dim=1)):
        broken("quantized_linear_dynamic", "activations are no longer rounded to the 7-bit codes of "
               "the tensor's range (step 2/127 over the anchored [-1, 1])")
    if not torch.equal(alone, beside[:5]):
        broken("quantized_linear_dynamic", "a row's result depends on other rows within the anchored "
               "range: the per-row int8 layers would no longer be batch-invariant")


def test_entry_prefix_cache_layer():
    import torch
    from transformers import GPT2Config, GPT2Model
    from transformers.cache_utils import Cache

    torch.manual_seed(3)
    model = GPT2Model(GPT2Config(vocab_size=97, n_positions=64, n_embd=32, n_layer=2, n_head=4)).eval()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)  # default init hides position and mask mistakes
    prefixes = torch.randint(0, 97, (2, 7))
    tails = torch.randint(0, 97, (3, 4))
    index = torch.tensor([1, 0, 0])
    with torch.inference_mode():
        cache = model(input_ids=prefixes, use_cache=True).past_key_values
        kv = [(layer.keys, layer.values) for layer in cache.layers]
        try:
            layers = [compat.prefix_cache_layer(k, v, index) for k, v in kv]
            got = model(input_ids=tails, position_ids=torch.arange(7, 11).repeat(3, 1),
                        attention_mask=torch.ones(3, 11, dtype=torch.long),
                        past_key_values=Cache(layers=layers), use_cache=True).last_hidden_state
        except (AttributeError, RuntimeError, TypeError, ValueError) as e:
            broken("prefix_cache_layer", f"a Cache of DynamicLayer subclasses no longer runs: {e!r}")
        want = model(input_ids=torch.cat([prefixes[index], tails], dim=1)).last_hidden_state[:, 7:]
    if not _close(got, want):
        broken("prefix_cache_layer", "a continuation over the expanded prefix no longer equals the "
               "whole sequence's forward pass: DynamicLayer's fields or update contract changed")
    if layers[0].get_seq_length() != 7 or layers[0].keys.shape[0] != 2:
        broken("prefix_cache_layer", "the layer stored what it was given, or no longer reports its "
               "prefix length from its keys")


def test_entry_session_logs_dir():
    import ray._private.worker as worker
    from ray._private.node import Node

    if not hasattr(worker, "_global_node"):
        broken("session_logs_dir", "ray._private.worker has no _global_node")
    if not callable(getattr(Node, "get_logs_dir_path", None)):
        broken("session_logs_dir", "Ray's Node has no get_logs_dir_path()")


def test_entry_fake_head_node_id():
    try:
        node_id = compat.fake_head_node_id()
    except ImportError as error:
        broken("fake_head_node_id", f"Ray's fake multi-node provider moved: {error}")
    if len(node_id) != 56 or any(c not in "0123456789abcdef" for c in node_id):
        broken("fake_head_node_id", f"FAKE_HEAD_NODE_ID {node_id!r} is no longer a 28-byte hex node id")


def test_entry_kill_gcs_server():
    from ray._private import ray_constants
    from ray._private.node import Node

    if getattr(ray_constants, "PROCESS_TYPE_GCS_SERVER", None) != "gcs_server":
        broken("kill_gcs_server", "ray_constants.PROCESS_TYPE_GCS_SERVER is no longer 'gcs_server'")
    kill = getattr(Node, "kill_gcs_server", None)
    if not callable(kill) or "check_alive" not in inspect.signature(kill).parameters:
        broken("kill_gcs_server", "Node.kill_gcs_server(check_alive=...) is gone")
    if "all_processes" not in inspect.getsource(Node.__init__) and not hasattr(Node, "all_processes"):
        broken("kill_gcs_server", "Node no longer keeps all_processes")


def test_entry_start_gcs_server():
    from ray._private.node import Node

    start = getattr(Node, "start_gcs_server", None)
    if not callable(start) or list(inspect.signature(start).parameters) != ["self"]:
        broken("start_gcs_server", "Node.start_gcs_server(self) is gone or takes arguments")


def _router():
    """A context-affinity router outside any handle, its queue-length cache on."""
    from ray.serve._private.common import DeploymentHandleSource, DeploymentID

    from dialscore_server.scheduling.context_affinity import ContextAffinityRouter

    return ContextAffinityRouter(deployment_id=DeploymentID(name="nll-x", app_name="x"),
                                 handle_source=DeploymentHandleSource.UNKNOWN,
                                 use_replica_queue_len_cache=True)


def test_entry_cached_queue_len():
    from ray.serve.request_router import ReplicaID, RequestRouter

    if not isinstance(getattr(RequestRouter, "replica_queue_len_cache", None), property):
        broken("cached_queue_len", "RequestRouter.replica_queue_len_cache is gone: the affinity "
               "router probes every request's owner")
    router = _router()
    replica = ReplicaID("r1", router._deployment_id)
    assert compat.cached_queue_len(router, replica) is None
    router.on_new_queue_len_info(replica, 3)  # what Serve calls with a replica's answer
    if compat.cached_queue_len(router, replica) != 3:
        broken("cached_queue_len", "replica_queue_len_cache.get(replica_id) no longer returns "
               "what on_new_queue_len_info recorded")
    router.on_send_request(replica)
    assert compat.cached_queue_len(router, replica) == 4


def test_entry_request_backoff():
    import asyncio

    from ray.serve.request_router import PendingRequest, RequestRouter

    async def pending():
        return PendingRequest(args=[], kwargs={}, metadata=None)

    request = asyncio.run(pending())
    if not compat.request_backoff(request) or request.routing_context.should_backoff is not True:
        broken("request_backoff", "PendingRequest.routing_context.should_backoff is gone: a "
               "request that finds every replica full is retried without backoff")
    loop = inspect.getsource(RequestRouter._choose_replicas_with_backoff)
    if "routing_context.should_backoff" not in loop:
        broken("request_backoff", "Serve's routing loop no longer reads "
               "routing_context.should_backoff: setting it no longer asks for a backoff")


def test_entry_ray_start_timed_out():
    import ray._private.node as node

    squeezed = "".join(inspect.getsource(node.Node.__init__).split())  # no whitespace
    raised = 'raiseException("' + "".join(compat.RAY_START_TIMEOUT_MESSAGE.split())
    if "raylet_start_wait_time_s" not in squeezed or raised not in squeezed:
        broken("ray_start_timed_out", "ray._private.node.Node.__init__ no longer raises a bare "
               f"Exception starting {compat.RAY_START_TIMEOUT_MESSAGE!r} when its raylet does not "
               "register in time: the embedded default no longer retries a timed-out start")
    assert compat.ray_start_timed_out(Exception(compat.RAY_START_TIMEOUT_MESSAGE + ". This ..."))
    assert not compat.ray_start_timed_out(RuntimeError(compat.RAY_START_TIMEOUT_MESSAGE))
    assert not compat.ray_start_timed_out(ValueError("num_cpus must be positive"))



def test_entry_serve_replicas():
    from ray.serve.schema import ReplicaDetails, ServeInstanceDetails

    try:
        from ray.serve._private.client import ServeControllerClient
        from ray.serve.context import _get_global_client  # noqa: F401
    except ImportError as error:
        broken("serve_replicas", f"Serve's controller client moved: {error}")
    if not callable(getattr(ServeControllerClient, "get_serve_details", None)):
        broken("serve_replicas", "Serve's controller client has no get_serve_details()")
    # The document it returns is the REST API's ServeInstanceDetails: the fields read here.
    if "applications" not in ServeInstanceDetails.model_fields:
        broken("serve_replicas", "ServeInstanceDetails has no applications")
    missing = {"replica_id", "state", "node_id", "actor_name", "pid"} - set(ReplicaDetails.model_fields)
    if missing:
        broken("serve_replicas", f"Serve's ReplicaDetails lost {sorted(missing)}")
