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
