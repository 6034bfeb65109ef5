"""A JSON Schema for the parts of a KubeRay RayService (ray.io/v1) that deployments/kuberay/
uses, written for this project by reading KubeRay v1.7.0's CRD
(ray-operator/config/crd/bases/ray.io_rayservices.yaml) and its Go types
(ray-operator/apis/ray/v1/rayservice_types.go, raycluster_types.go). It is not a copy: no package
on PyPI or npm ships KubeRay's CRDs, and CI reaches nothing else, so the schema the API server
would apply cannot be fetched at test time.

Stricter than the CRD on purpose: objects we write list their allowed fields
(``additionalProperties: false``), so a typo or a field KubeRay marks deprecated
(``serviceUnhealthySecondThreshold``, ``deploymentUnhealthySecondThreshold``: "not used anymore",
kuberay#1685) fails here, where the API server would accept it silently. Field names, types,
enums and required fields follow v1.7.0; Kubernetes' own Pod fields are checked only as far as we
use them (containers, env from secrets, ports, volumes, PVCs).
"""

from __future__ import annotations

from typing import Any

_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_QUANTITY = {"type": ["string", "integer", "number"]}          # x-kubernetes-int-or-string
_INT32 = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}

_SECRET_REF = {"type": "object", "required": ["name", "key"], "additionalProperties": False,
               "properties": {"name": {"type": "string"}, "key": {"type": "string"},
                              "optional": {"type": "boolean"}}}
_ENV_VAR = {"type": "object", "required": ["name"], "additionalProperties": False,
            "properties": {"name": {"type": "string"}, "value": {"type": "string"},
                           "valueFrom": {"type": "object", "additionalProperties": False,
                                         "properties": {"secretKeyRef": _SECRET_REF}}}}
_CONTAINER = {
    "type": "object", "required": ["name"],
    "properties": {
        "name": {"type": "string"}, "image": {"type": "string"},
        "resources": {"type": "object", "additionalProperties": False, "properties": {
            "limits": {"type": "object", "additionalProperties": _QUANTITY},
            "requests": {"type": "object", "additionalProperties": _QUANTITY}}},
        "ports": {"type": "array", "items": {
            "type": "object", "required": ["containerPort"], "additionalProperties": False,
            "properties": {"containerPort": {"type": "integer", "minimum": 1, "maximum": 65535},
                           "name": {"type": "string", "maxLength": 15},
                           "protocol": {"enum": ["TCP", "UDP", "SCTP"]}}}},
        "env": {"type": "array", "items": _ENV_VAR},
        "volumeMounts": {"type": "array", "items": {
            "type": "object", "required": ["name", "mountPath"],
            "properties": {"name": {"type": "string"}, "mountPath": {"type": "string"},
                           "readOnly": {"type": "boolean"}}}},
    },
}
_POD_TEMPLATE = {
    "type": "object",
    "properties": {
        "metadata": {"type": "object"},
        "spec": {"type": "object", "required": ["containers"], "properties": {
            "containers": {"type": "array", "minItems": 1, "items": _CONTAINER},
            "securityContext": {"type": "object", "properties": {
                "runAsNonRoot": {"type": "boolean"}, "runAsUser": {"type": "integer"},
                "fsGroup": {"type": "integer"}}},
            "volumes": {"type": "array", "items": {
                "type": "object", "required": ["name"],
                "properties": {"name": {"type": "string"},
                               "persistentVolumeClaim": {
                                   "type": "object", "required": ["claimName"],
                                   "properties": {"claimName": {"type": "string"},
                                                  "readOnly": {"type": "boolean"}}},
                               "emptyDir": {"type": "object"}}}},
            "tolerations": {"type": "array", "items": {"type": "object"}},
        }},
    },
}
_REDIS_CREDENTIAL = {"type": "object", "additionalProperties": False, "properties": {
    "value": {"type": "string"},
    "valueFrom": {"type": "object", "additionalProperties": False,
                  "properties": {"secretKeyRef": _SECRET_REF}}}}

RAYSERVICE: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "ray.io/v1"},
        "kind": {"const": "RayService"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object", "required": ["rayClusterConfig"], "additionalProperties": False,
            "properties": {
                # v1.7.0 RayServiceSpec, without the two deprecated thresholds.
                "rayClusterDeletionDelaySeconds": {"type": "integer", "minimum": 0},
                "serveService": {"type": "object"},
                "upgradeStrategy": {"type": "object", "properties": {
                    "type": {"enum": ["NewCluster", "NewClusterWithIncrementalUpgrade", "None"]}}},
                "managedBy": {"enum": ["ray.io/kuberay-operator", "kueue.x-k8s.io/multikueue"]},
                "serveConfigV2": {"type": "string"},
                "excludeHeadPodFromServeSvc": {"type": "boolean"},
                "suspend": {"type": "boolean"},
                "rayClusterConfig": {
                    "type": "object", "required": ["headGroupSpec"], "additionalProperties": False,
                    "properties": {
                        "rayVersion": {"type": "string"},
                        "enableInTreeAutoscaling": {"type": "boolean"},
                        "autoscalerOptions": {"type": "object", "additionalProperties": False, "properties": {
                            "idleTimeoutSeconds": _INT32,
                            "upscalingMode": {"enum": ["Default", "Aggressive", "Conservative"]},
                            "version": {"enum": ["v1", "v2"]},
                            "resources": {"type": "object"}, "image": {"type": "string"},
                            "env": {"type": "array", "items": _ENV_VAR}}},
                        "gcsFaultToleranceOptions": {
                            "type": "object", "additionalProperties": False, "properties": {
                                "backend": {"enum": ["redis", "rocksdb"]},
                                "redisAddress": {"type": "string"},
                                "redisUsername": _REDIS_CREDENTIAL, "redisPassword": _REDIS_CREDENTIAL,
                                "externalStorageNamespace": {"type": "string"},
                                "storage": {"type": "object"}}},
                        "authOptions": {"type": "object", "properties": {
                            "mode": {"enum": ["disabled", "token"]}, "secretName": {"type": "string"}}},
                        "headServiceAnnotations": _STR_MAP,
                        "suspend": {"type": "boolean"},
                        "headGroupSpec": {
                            "type": "object", "required": ["template"], "additionalProperties": False,
                            "properties": {"rayStartParams": _STR_MAP, "template": _POD_TEMPLATE,
                                           "serviceType": {"type": "string"},
                                           "resources": _STR_MAP, "labels": _STR_MAP,
                                           "enableIngress": {"type": "boolean"}}},
                        "workerGroupSpecs": {"type": "array", "items": {
                            "type": "object", "required": ["groupName", "template"],
                            "additionalProperties": False,
                            "properties": {"groupName": {"type": "string"}, "replicas": _INT32,
                                           "minReplicas": _INT32, "maxReplicas": _INT32,
                                           "idleTimeoutSeconds": _INT32, "rayStartParams": _STR_MAP,
                                           "template": _POD_TEMPLATE, "numOfHosts": _INT32,
                                           "resources": _STR_MAP, "labels": _STR_MAP}}},
                    },
                },
            },
        },
    },
}
