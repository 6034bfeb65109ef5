"""deployments/kuberay/: the RayService validates against our schema of KubeRay v1.7.0's RayService
(tests/deploy/kuberay_schema.py says how it was derived and why it is not the CRD itself), uses no
deprecated field, and every Ray pod gets the API-token secret (required), the hub token, the
shared model volume and the metrics port; the PVC, the PodMonitor and the example secrets fit it."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml

from kuberay_schema import RAYSERVICE

KUBERAY = Path(__file__).resolve().parents[2] / "deployments" / "kuberay"


def load(name: str) -> list[dict]:
    return list(yaml.safe_load_all((KUBERAY / name).read_text()))


def manifest() -> dict:
    (doc,) = load("rayservice.yaml")
    return doc


def pods(doc: dict) -> list[dict]:
    cluster = doc["spec"]["rayClusterConfig"]
    return [cluster["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in cluster["workerGroupSpecs"]]


def test_rayservice_validates_against_the_kuberay_schema():
    jsonschema.validate(manifest(), RAYSERVICE)


@pytest.mark.parametrize("field", ["serviceUnhealthySecondThreshold", "deploymentUnhealthySecondThreshold",
                                   "serveConfig", "typoField"])
def test_deprecated_or_unknown_fields_fail(field):
    doc = copy.deepcopy(manifest())
    doc["spec"][field] = 300
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, RAYSERVICE)


def test_every_pod_gets_the_required_token_the_hub_token_the_models_and_metrics():
    doc = manifest()
    for pod in pods(doc):
        (container,) = pod["containers"]
        env = {e["name"]: e for e in container["env"]}
        api = env["DIALSCORE_API_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert api["name"] == "dialscore-api-token" and api["optional"] is False
        assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "dialscore-hub-token"
        assert env["HF_HOME"]["value"].startswith("/models")
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
                  if "persistentVolumeClaim" in v}
        assert not any("emptyDir" in v for v in pod["volumes"])
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert claims == {"models": "dialscore-models"} and mounts["models"] == "/models"
        assert {"name": "metrics", "containerPort": 8080} in container["ports"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0


def test_gcs_fault_tolerance_and_autoscaling_are_configured():
    cluster = manifest()["spec"]["rayClusterConfig"]
    ft = cluster["gcsFaultToleranceOptions"]
    assert ft["redisAddress"] and ft["redisPassword"]["valueFrom"]["secretKeyRef"]["name"] == "dialscore-redis"
    assert cluster["enableInTreeAutoscaling"] is True
    assert cluster["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"
    serve = yaml.safe_load(manifest()["spec"]["serveConfigV2"])["applications"][0]["args"]
    assert serve["auth_required"] is True and serve.get("auth_token_env", "DIALSCORE_API_TOKEN") == "DIALSCORE_API_TOKEN"


def test_pvc_secrets_and_podmonitor_match_the_rayservice():
    (pvc,) = load("models-pvc.yaml")
    assert pvc["kind"] == "PersistentVolumeClaim" and pvc["metadata"]["name"] == "dialscore-models"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]     # head and every worker at once
    secrets = {s["metadata"]["name"]: s for s in load("secrets.example.yaml")}
    assert set(secrets) == {"dialscore-api-token", "dialscore-hub-token", "dialscore-redis"}
    assert all(v.startswith("REPLACE-") for s in secrets.values() for v in s["stringData"].values())
    (monitor,) = load("podmonitor.yaml")
    assert monitor["kind"] == "PodMonitor"
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["metrics"]
    types = monitor["spec"]["selector"]["matchExpressions"][0]
    assert types["key"] == "ray.io/node-type" and set(types["values"]) == {"head", "worker"}
    namespace = manifest()["metadata"]["namespace"]
    assert pvc["metadata"]["namespace"] == namespace == monitor["spec"]["namespaceSelector"]["matchNames"][0]
