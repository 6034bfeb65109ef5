"""The CEDAR probes end to end over the real Serve app: the pipeline measures what the paper measures.

A decoder-only stand-in trained for ~20 s on templated English has learned word order, so it must
prefer valid explanations over shuffled/dropped/reversed ones (attribution, complete corruptions:
accuracy >= 0.85, the signature of a correct pipeline in the paper). The untrained stand-in has
learned nothing and must sit near chance (0.5 ± 0.15).
"""

from __future__ import annotations

import pytest

from serve_apps import ONE_THREAD, app_args, deploy_app
from dialscore.client import DialscoreClient
from dialscore.probes import SAMPLE_DATA as SAMPLE
from dialscore.probes.run import run_probes

pytestmark = [pytest.mark.serve, pytest.mark.slow]


@pytest.fixture(scope="module")
def trained(served, stand_ins, trained_gpt2):
    """An app of its own with the trained and the untrained decoder-only stand-ins."""
    args = app_args(stand_ins, models=[
        {"name": "dialogpt-medium", "serve_as": "trained-gpt2",
         "overrides": {"source": str(trained_gpt2)}, "serving": ONE_THREAD},
        {"name": "dialogpt-medium", "serve_as": "untrained-gpt2", "serving": ONE_THREAD}])
    with deploy_app(served, "trained", args) as app:
        yield app


def test_trained_stand_in_passes_and_untrained_sits_at_chance(trained, tmp_path):
    with DialscoreClient(trained.url) as client:
        report = run_probes(client, SAMPLE, ["trained-gpt2", "untrained-gpt2"], ["attribution"], seed=0,
                            out_dir=tmp_path, progress=False, plots=True)
    trained = report.metrics("trained-gpt2", "attribution", category="complete")
    untrained = report.metrics("untrained-gpt2", "attribution", category="complete")
    breakdown = {c: round(report.metrics("trained-gpt2", "attribution", corruption=c).accuracy, 3)
                 for c in ("shuffle", "dropped", "reversed")}
    print("attribution/complete accuracy: trained", trained.accuracy, breakdown,
          "untrained", untrained.accuracy)
    assert trained.accuracy >= 0.85, (trained, breakdown)
    assert abs(untrained.accuracy - 0.5) <= 0.15, untrained
    assert (tmp_path / "report.json").is_file() and (tmp_path / "corruptions.png").is_file()
