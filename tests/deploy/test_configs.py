"""Every deployment config validates against Serve's own schema and the app's typed arguments."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from dialscore_server.gateway.args import AppArgs

DEPLOYMENTS = Path(__file__).resolve().parents[2] / "deployments"


def _serve_configs():
    yield "local.yaml", yaml.safe_load((DEPLOYMENTS / "local.yaml").read_text())
    yield "cluster.yaml", yaml.safe_load((DEPLOYMENTS / "cluster.yaml").read_text())
    yield "cluster-fractional.yaml", yaml.safe_load((DEPLOYMENTS / "cluster-fractional.yaml").read_text())
    manifest = yaml.safe_load((DEPLOYMENTS / "kuberay" / "rayservice.yaml").read_text())
    yield "kuberay serveConfigV2", yaml.safe_load(manifest["spec"]["serveConfigV2"])


@pytest.mark.parametrize("name,config", list(_serve_configs()), ids=lambda v: v if isinstance(v, str) else "")
def test_config_validates_against_serve_and_app_schemas(name, config):
    schema = ServeDeploySchema.model_validate(config)
    assert schema.applications, name
    for app in config["applications"]:
        assert app["import_path"] == "dialscore_server.gateway.build:build_app"
        args = AppArgs.model_validate(app["args"])
        for entry in args.models + args.classifiers:
            # More requests must fit in a replica than Serve's default of 5 caps batches at.
            assert entry.serving.max_ongoing_requests > 5


def test_a_model_deployments_serve_options_are_its_serving_options_as_serve_reads_them():
    from ray.serve.schema import DeploymentSchema

    from dialscore_server.contract.options import ServingOptions
    from dialscore_server.gateway.build import serve_options

    opts = ServingOptions(health_check_period_s=1.5, max_ongoing_requests=7,
                          max_queued_requests=9, num_replicas=2, num_cpus=0.25)
    deployment = DeploymentSchema.model_validate(serve_options("nll-x", opts))
    assert (deployment.health_check_period_s, deployment.max_ongoing_requests,
            deployment.max_queued_requests, deployment.num_replicas) == (1.5, 7, 9, 2)
    assert deployment.ray_actor_options.num_cpus == 0.25


def test_kuberay_embeds_the_cluster_config_verbatim():
    manifest = yaml.safe_load((DEPLOYMENTS / "kuberay" / "rayservice.yaml").read_text())
    cluster = yaml.safe_load((DEPLOYMENTS / "cluster.yaml").read_text())
    assert yaml.safe_load(manifest["spec"]["serveConfigV2"]) == cluster
    assert manifest["kind"] == "RayService"


def test_a_typo_in_app_args_fails():
    bad = yaml.safe_load((DEPLOYMENTS / "local.yaml").read_text())["applications"][0]["args"]
    bad["models"][0]["serving"]["max_ongoing_request"] = 64
    with pytest.raises(ValueError, match="max_ongoing_request"):
        AppArgs.model_validate(bad)


def test_cluster_config_uses_hub_ids_on_gpus():
    args = AppArgs.model_validate(yaml.safe_load((DEPLOYMENTS / "cluster.yaml").read_text())
                                  ["applications"][0]["args"])
    assert args.stand_ins is None
    sources = {cfg.source for cfg, _ in args.model_configs() + args.classifier_configs()}
    assert "microsoft/DialoGPT-medium" in sources
    assert "ynie/roberta-large-snli_mnli_fever_anli_R1_R2_R3-nli" in sources
    assert all(opts.num_gpus >= 1 and opts.autoscaling_config for _, opts in args.model_configs())


def test_fractional_profile_differs_from_the_one_gpu_profile_only_in_gpu_share_and_budget():
    """Same applications, models, autoscaling and auth; num_gpus 0.25 (four replicas per GPU)
    and a token budget halved so four passes fit one GPU's memory (arithmetic in the file)."""
    whole = yaml.safe_load((DEPLOYMENTS / "cluster.yaml").read_text())
    shared = yaml.safe_load((DEPLOYMENTS / "cluster-fractional.yaml").read_text())
    one = AppArgs.model_validate(whole["applications"][0]["args"])
    frac = AppArgs.model_validate(shared["applications"][0]["args"])
    assert [m.name for m in one.models + one.classifiers] == [m.name for m in frac.models + frac.classifiers]
    for a, b in zip(one.models + one.classifiers, frac.models + frac.classifiers):
        assert a.serving.num_gpus == 1 and b.serving.num_gpus == 0.25
        assert b.serving.token_budget * 2 == a.serving.token_budget
        assert a.serving.model_dump(exclude={"num_gpus", "token_budget"}) == \
            b.serving.model_dump(exclude={"num_gpus", "token_budget"})
    assert frac.auth_required and one.auth_required
    # GPUs at the minimum replica count: 5 whole GPUs become ceil(5 x 0.25) = 2.
    entries = one.models + one.classifiers
    assert sum(e.serving.num_gpus * e.serving.autoscaling_config["min_replicas"] for e in entries) == 5
    assert sum(e.serving.num_gpus * e.serving.autoscaling_config["min_replicas"]
               for e in frac.models + frac.classifiers) == 1.25
