"""The custom resources a render may hold (the Prometheus Operator's PodMonitor, with metrics.pod_monitor), their
CRDs (tests/controlplane/crds/), and a check of one against its CRD as strict as kubectl's field validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRDS = Path(__file__).resolve().parent / "controlplane" / "crds"
CUSTOM_RESOURCES = {"PodMonitor": CRDS / "monitoring.coreos.com_podmonitors.yaml"}


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI schema of a CRD with every object's unknown fields refused (the API server prunes them, and
    kubectl's strict validation, its default, refuses an object that had any); metadata is the API server's."""
    result = dict(schema)
    if "properties" in schema:
        result["properties"] = {name: child if name == "metadata" else _strict(child)
                                for name, child in schema["properties"].items()}
        result.setdefault("additionalProperties", False)
    if "items" in schema:
        result["items"] = _strict(schema["items"])
    return result


def strict_custom_resource(doc: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError where ``doc`` is not what its CRD admits."""
    crd = yaml.safe_load(CUSTOM_RESOURCES[doc["kind"]].read_text())
    group = crd["spec"]["group"]
    version = next(v for v in crd["spec"]["versions"] if f"{group}/{v['name']}" == doc["apiVersion"])
    jsonschema.validate(doc, _strict(version["schema"]["openAPIV3Schema"]))
