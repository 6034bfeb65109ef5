"""`dialscore batch`: files of scoring requests in the OpenAI Batch API line format, run on Ray
Data with the service's own engines and routes (see docs/batch.md).

* :mod:`.lines`: an input line's checks and the output line's shape;
* :mod:`.grouping`: the order requests are scored in (by model, then shared context);
* :mod:`.scorer`: one worker's models and routes, turning requests into output lines;
* :mod:`.output`: the output file, appended as blocks finish, and what a resume reads from it;
* :mod:`.executors`: in-process, or Ray Data ``map_batches`` over an actor pool;
* :mod:`.job`: the whole job and its summary.

Nothing here imports the gateway; the shared error handlers are in
:mod:`dialscore_server.contract.http_errors`, the model directory in
:mod:`dialscore_server.directory`.
"""
