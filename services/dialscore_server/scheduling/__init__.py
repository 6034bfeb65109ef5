"""The scheduling layer of a model replica: how requests share its engine.

One request's path, called one way, top to bottom:

1. :class:`~.serving.ChunkedServing` admits the request off the event loop (the endpoint's
   ``admit``: validate, tokenize, cut into :class:`~.chunks.Chunk` objects), waiting for requests
   admitted at the same moment (:mod:`.arrivals`);
2. :func:`~.chunks.take_turns` hands the chunks to the replica's runner one after the other, each
   as soon as the previous one's engine call begins (the runner: a :class:`~.lanes.LaneQueue`,
   one chunk per call in-process, merged calls in a replica, :mod:`.serving`), so each engine
   call merges about one chunk of every waiting request of its priority lane, interactive
   requests' chunks before bulk ones (:mod:`.lanes`);
3. the runner's engine call runs on the replica's one :class:`~.engine_thread.EngineThread`
   (at the replica's ``engine_priority``, :mod:`.cpu_priority`),
   accounted by the :class:`~.ledger.WorkLedger` (work done, dropped, wasted; engine time and the
   share nobody waited for), under a :class:`~.cancellation.CallGuard` that leaves cancelled
   requests' items out of the passes not yet run; in a replica, through its device's gate
   (:mod:`.device_gate`): a call serving an interactive chunk holds it, and a bulk pool that
   yields starts a call only once it is clear, and pauses a running one while it is held, at
   the call's pause points (:mod:`.pause_points`: between passes and layers);
4. the endpoint's ``run`` computes the merged chunks in forward passes the engine plans with
   :mod:`.planner` (token budgets, shared prefixes).

Serve's health check takes the same thread: :meth:`~.serving.ChunkedServing.check_health` runs
the engine's probe on the engine thread when no engine call is at work (and fails when the one at
work has shown no progress, no pass or layer begun, for more than ``stall_s``), so the engine is
only ever called from that one thread.

Which replica a request reaches is decided before all this, in the caller's Serve handle:
:mod:`.context_affinity` is a Serve request router that sends requests whose contexts start alike
to the same replica; the endpoint says what a request's context is (the NLL deployments':
:mod:`dialscore_server.nll.affinity`).

Nothing here imports Ray or torch at module import but :mod:`.context_affinity` (it subclasses
Serve's router, and runs in the callers, not in the replica); endpoints supply only ``admit`` and
``run``.
"""
