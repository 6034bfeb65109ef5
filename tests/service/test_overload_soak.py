"""The overload soak, short (`python -m loadtests.soak` runs the long one): under load above capacity the
service sheds with 503 + Retry-After, admitted requests keep a bounded p99, memory stays flat and it
recovers by itself when the load stops.

On `tiny-queue` (one replica, 1 request executing, 1 queued: the `tiny_queue` app of
tests/service/conftest.py), so shedding
starts at once; the p99 bound follows from the queue: an admitted request waits behind at most
max_ongoing + max_queued = 2 requests.
"""

from __future__ import annotations

import pytest

from loadtests.soak import replica_pids, soak

pytestmark = [pytest.mark.serve, pytest.mark.slow]


def test_short_soak_sheds_keeps_p99_bounded_and_recovers(tiny_queue):
    pids = replica_pids("tiny", ("nll-tiny-queue", "gateway"))
    report = soak(tiny_queue.url, "tiny-queue", seconds=12, factor=1.5, measure_seconds=4, concurrency=2,
                  items=4, rss_pids=pids, rss_every=2.0, timeout=30, echo=lambda s: None)
    print("\n" + report.table())
    assert not report.bad(), report.bad()
    assert set(report.statuses) <= {"200", "503"}, report.statuses
    assert report.shed_rate > 0.05, "1.5x capacity was not shed"
    assert report.retry_after_share == 1.0
    assert all("overloaded" in e for e in report.errors), report.errors
    # Admitted: at most 2 requests ahead (1 executing + 1 queued), plus its own; 4x and 1 s of
    # slack for a shared 2-core machine.
    bound = 4 * 3 * report.capacity_p50_s + 1.0
    assert report.admitted_p99_s <= bound, (report.admitted_p99_s, bound)
    assert report.recovery_s is not None and report.recovery_s < 5.0, report.recovery_s
    tiny = {k: v for k, v in report.rss_summary.items() if "tiny-queue" in k}
    assert tiny, report.rss_summary
    for name, s in tiny.items():
        assert s["last"] - s["first"] < 100, (name, s)  # MB; a leak per request would show
