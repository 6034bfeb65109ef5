"""deployments/kuberay/: the RayService validates against our schema of KubeRay v1.7.0's RayService
(tests/deploy/kuberay_schema.py says how it was derived and why it is not the CRD itself), uses no
deprecated field, and every Ray pod gets the API-token secret (required), the hub token, the
shared model volume and the metrics port; the PVC, the PodMonitor, the example secrets and the
nginx front proxy (the ingress that enforces header deadlines and a connection cap) fit it."""

from __future__ import annotations

import copy
import re
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
    # Workers outlast a head restart: they wait for the GCS longer than Ray's default 60 s.
    for group in cluster["workerGroupSpecs"]:
        (container,) = group["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert float(env["RAY_gcs_rpc_server_reconnect_timeout_s"]) >= 300, env
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


def nginx_directives(conf: str) -> dict[str, list[str]]:
    """Every simple directive of an nginx config (`name args;`), its arguments as one string per
    occurrence, comments dropped (enough for the flat config front-proxy.yaml holds)."""
    found: dict[str, list[str]] = {}
    for statement in re.findall(r"([a-z_]+)\s+((?:'[^']*'|[^;{}'])*);", re.sub(r"#[^\n]*", "", conf)):
        found.setdefault(statement[0], []).append(" ".join(statement[1].split()))
    return found


def test_the_front_proxy_enforces_the_front_doors_limits_in_front_of_serve():
    """front-proxy.yaml: nginx, in front of KubeRay's Serve Service of this RayService, holds the
    embedded front door's default header deadline and connection cap, answers its own 503 with
    the service's error body, and passes every body and answer the gateway itself accepts."""
    from dialscore_server.contract.errors import ErrorResponse
    from dialscore_server.contract.limits import Limits
    from dialscore_server.gateway.front_door import FrontDoorLimits

    config, deployment, service = load("front-proxy.yaml")
    rayservice = manifest()
    namespace = rayservice["metadata"]["namespace"]
    assert {d["metadata"]["namespace"] for d in (config, deployment, service)} == {namespace}
    found = nginx_directives(config["data"]["nginx.conf"])
    limits = FrontDoorLimits()

    assert found["client_header_timeout"] == [f"{limits.header_timeout_s:g}s"]
    key, zone = found["limit_conn_zone"][0].split()[:2]
    assert key == "$server_name" and found["server_name"] and found["server_name"][0] != '""'
    zone_name = zone.removeprefix("zone=").split(":")[0]
    assert found["limit_conn"] == [f"{zone_name} {limits.max_connections}"]
    assert found["limit_conn_status"] == ["503"] and found["error_page"] == ["503 @overloaded"]
    assert "Retry-After 1 always" in found["add_header"]
    status, body = found["return"][0].split(" ", 1)
    error = ErrorResponse.model_validate_json(body.strip("'"))
    assert status == "503" and error.error.type == "overloaded"

    serve_config = yaml.safe_load(rayservice["spec"]["serveConfigV2"])
    serve_port = serve_config["http_options"]["port"]
    assert found["server"] == [
        f"{rayservice['metadata']['name']}-serve-svc.{namespace}.svc.cluster.local:{serve_port}"]
    assert found["proxy_pass"] == ["http://dialscore_serve"]
    args = serve_config["applications"][0]["args"]
    assert int(found["proxy_read_timeout"][0].removesuffix("s")) > args["request_timeout_s"]
    max_body = Limits.model_validate(args.get("limits", {})).max_body_bytes
    assert int(found["client_max_body_size"][0].removesuffix("m")) * 2**20 > max_body

    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"] == deployment["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    (container,) = pod["spec"]["containers"]
    (port,) = container["ports"]
    assert found["listen"] == [str(port["containerPort"])]
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    (mount,) = container["volumeMounts"]
    (volume,) = pod["spec"]["volumes"]
    assert mount["mountPath"] == "/etc/nginx/nginx.conf" and mount["subPath"] == "nginx.conf"
    assert volume["configMap"]["name"] == config["metadata"]["name"] and mount["name"] == volume["name"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_nothing_patches_serves_proxy():
    """No image or manifest installs code into Serve's proxy (it has no front door; the ingress
    enforces the limits)."""
    root = KUBERAY.parents[1]
    for path in [root / "Dockerfile", *sorted((root / "deployments").rglob("*.yaml"))]:
        text = path.read_text()
        assert "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH" not in text and "proxy_guard" not in text, path


def test_the_head_replaces_a_dead_proxy_as_soon_as_the_embedded_default_does():
    """Serve's controller runs on the head: its proxy health-check period is the embedded
    default's (gateway/embedded.py PROXY_HEALTH_ENV), not Ray's 10 s."""
    from dialscore_server.gateway.embedded import PROXY_HEALTH_ENV

    head = manifest()["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    (container,) = head["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    for name, value in PROXY_HEALTH_ENV.items():
        assert env.get(name) == value, (name, env.get(name))
