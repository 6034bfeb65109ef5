"""A whole batch job: read and check the input file, skip what the output file already answers,
write the refused lines' errors, score the rest in scoring order on an executor, append each
block as it comes back, and sum it up.

The job never aborts on a bad line: a line refused by the line checks, or answered with an error
by a route, is an output line like any other (``error`` set). It stops only on what is not a
line's fault (the input unreadable, a model that cannot be loaded, the cluster gone); then the
output file holds every block finished so far, and running the same command again resumes.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dialscore_server.batch.executors import Executor
from dialscore_server.batch.grouping import in_scoring_order
from dialscore_server.batch.lines import Rejected, Request, parse_line, rejected_line
from dialscore_server.batch.output import OutputFile

#: Test hook: SIGKILL this process once the job has appended at least this many output lines in
#: this run (a job killed mid-way, at a point the test chooses; never set it otherwise).
KILL_AFTER_ENV = "DIALSCORE_BATCH_TEST_KILL_AFTER"


@dataclass
class Summary:
    """What a job did. `total`: input lines; `resumed`: lines the output already answered when
    the job started; `done`/`failed`: lines answered in this run with a 200 / an error;
    `seconds`: this run's time; `first_block_s`: from the start to the first scored block
    written (reading, Ray and actor start, model load, one block; None when nothing was scored);
    `items_per_s`: lines answered per second in this run; `torn_bytes`: bytes of a torn last
    output line cut off at the start; `notes`: what the executor met (nodes lost and their
    blocks re-run)."""

    total: int
    resumed: int
    done: int
    failed: int
    seconds: float
    first_block_s: float | None = None
    torn_bytes: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def items_per_s(self) -> float:
        return (self.done + self.failed) / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "items_per_s": round(self.items_per_s, 3)}

    def line(self) -> str:
        return "".join([
            f"batch: {self.done} done, {self.failed} failed, {self.resumed} resumed from the "
            f"output, {self.total} lines; {self.seconds:.1f} s, {self.items_per_s:.2f} items/s",
            *(f"\nbatch: {note}" for note in self.notes)])


def read_requests(path: str | Path) -> tuple[list[Request], list[Rejected], int]:
    """Every non-blank line of the input file checked: requests, refused lines, line count."""
    requests: list[Request] = []
    rejected: list[Rejected] = []
    seen: set[str] = set()
    total = 0
    with open(path, encoding="utf-8") as f:
        for number, text in enumerate(f, start=1):
            if not text.strip():
                continue
            total += 1
            parsed = parse_line(text, number, seen)
            (requests if isinstance(parsed, Request) else rejected).append(parsed)
    return requests, rejected, total


def run_job(input_path: str | Path, output_path: str | Path, executor: Executor, *,
            progress: bool = True, on_block: Callable[[int], None] | None = None) -> Summary:
    """Run the job (see the module docstring); `on_block(n)` after each appended block of n
    lines. The output file is appended to, never rewritten (a torn last line is cut off)."""
    from dialscore.reporting.progress import progress_bar

    start = time.perf_counter()
    output = OutputFile(output_path)
    done = output.resume()
    requests, rejected, total = read_requests(input_path)
    rejected = [r for r in rejected if not done.covers(r.line, None)]
    requests = [r for r in requests if not done.covers(r.line, r.custom_id)]
    resumed = total - len(requests) - len(rejected)
    kill_after = int(os.environ.get(KILL_AFTER_ENV, "0") or 0)
    counts = {"ok": 0, "failed": 0}
    bar = progress_bar(len(requests) + len(rejected), "batch", progress)

    def write(rows: list[dict]) -> None:
        n = output.append(rows)
        ok = sum(r.get("error") is None for r in rows)
        counts["ok"] += ok
        counts["failed"] += n - ok
        bar.update(n)
        if on_block is not None:
            on_block(n)
        if kill_after and counts["ok"] + counts["failed"] >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    first_block: float | None = None
    try:
        if rejected:
            write([rejected_line(r) for r in rejected])
        for block in executor.run(in_scoring_order(requests)):
            if first_block is None:
                first_block = time.perf_counter() - start
            write(block)
    finally:
        bar.close()
    return Summary(total=total, resumed=resumed, done=counts["ok"], failed=counts["failed"],
                   seconds=time.perf_counter() - start, first_block_s=first_block,
                   torn_bytes=done.torn_bytes, notes=list(getattr(executor, "notes", [])))
