"""The Kubernetes manifests under ``deploy/kubernetes`` are valid against the
Kubernetes schemas (kubernetes-validate, offline) and the Prometheus operator's
(its CRD schemas, vendored under ``schemas/``), run lockwatch as the Dockerfile
does, and alert with exactly the bundled rules of ``alerts/``.

``python -m tests.integration.test_deploy`` writes prometheusrule.yaml again
after the rules change."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from dockerfile_parse import DockerfileParser

from lockwatch.config.load import load_settings
from tests.fixtures.paths import ROOT

MANIFESTS = ROOT / "deploy" / "kubernetes"
SCHEMAS = Path(__file__).parent / "schemas"
KUBERNETES_VERSION = "1.31.0"
RULE_HEADER = """\
# Made from alerts/lockwatch.rules.yml: python -m tests.integration.test_deploy
# writes it again, and the tests check the two agree.
"""


def prometheus_rule() -> dict[str, Any]:
    rules = yaml.safe_load((ROOT / "alerts" / "lockwatch.rules.yml").read_text(encoding="utf-8"))
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "lockwatch", "labels": {"app.kubernetes.io/name": "lockwatch"}},
        "spec": {"groups": rules["groups"]},
    }


def crd_schema(kind: str) -> dict[str, Any]:
    """The vendored CRD schema; Go's regular expressions may put ``(?i)`` after
    ``^``, which Python's want first."""
    text = (SCHEMAS / f"{kind.lower()}.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text.replace('"^(?i)', '"(?i)^'))
    return schema


def documents() -> dict[str, dict[str, Any]]:
    """Every manifest the kustomization lists, by kind."""
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text(encoding="utf-8"))
    found: dict[str, dict[str, Any]] = {}
    for name in kustomization["resources"]:
        for document in yaml.safe_load_all((MANIFESTS / name).read_text(encoding="utf-8")):
            found[document["kind"]] = document
    return found


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text(encoding="utf-8"))
    files = {p.name for p in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)


@pytest.mark.parametrize("kind", ["ConfigMap", "Deployment", "Service"])
def test_the_core_manifests_are_valid_kubernetes(kind: str) -> None:
    kubernetes_validate.validate(documents()[kind], KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PrometheusRule"])
def test_the_operator_manifests_are_valid_against_its_crds(kind: str) -> None:
    schema = crd_schema(kind)
    document = documents()[kind]
    assert document["apiVersion"] == "monitoring.coreos.com/v1"
    jsonschema.validate(document, schema)


def test_a_wrong_manifest_is_caught() -> None:
    """The validators do refuse: a misspelt field and a wrong type."""
    deployment = documents()["Deployment"]
    deployment["spec"]["replica"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    monitor = documents()["ServiceMonitor"]
    monitor["spec"]["endpoints"][0]["interval"] = 30
    schema = crd_schema("ServiceMonitor")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, schema)


def test_the_prometheus_rule_is_the_bundled_rules() -> None:
    assert documents()["PrometheusRule"] == prometheus_rule()


def test_the_deployment_runs_the_image_as_the_dockerfile_does(tmp_path: Path) -> None:
    docs = documents()
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    dockerfile = DockerfileParser(str(ROOT / "Dockerfile"))
    user = next(i["value"] for i in dockerfile.structure if i["instruction"] == "USER")
    assert pod["securityContext"]["runAsUser"] == int(user.split(":")[0])
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    cmd = next(i["value"] for i in dockerfile.structure if i["instruction"] == "CMD")
    assert container["args"] == json.loads(cmd)
    assert container["ports"][0]["containerPort"] == 10057
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"
    service_port = docs["Service"]["spec"]["ports"][0]
    assert (service_port["port"], service_port["name"]) == (10057, "metrics")
    assert docs["ServiceMonitor"]["spec"]["endpoints"][0]["port"] == "metrics"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    secret = next(v for v in pod["volumes"] if v["name"] == "dsn")["secret"]["secretName"]
    assert secret == "lockwatch-dsn" and mounts["dsn"] == "/etc/lockwatch/secrets"

    # The ConfigMap's config loads, its DSN read from where the Secret is mounted.
    config = docs["ConfigMap"]["data"]["lockwatch.yml"]
    (tmp_path / "orders-dsn").write_text("postgresql://lockwatch:pw@db:5432/orders\n")
    (tmp_path / "lockwatch.yml").write_text(
        config.replace(mounts["dsn"] + "/", f"{tmp_path}/"), encoding="utf-8"
    )
    (target,) = load_settings(tmp_path / "lockwatch.yml").targets
    assert target.dsn == "postgresql://lockwatch:pw@db:5432/orders"


if __name__ == "__main__":
    out = MANIFESTS / "prometheusrule.yaml"
    text = yaml.safe_dump(prometheus_rule(), sort_keys=False, allow_unicode=True, width=100)
    out.write_text(RULE_HEADER + text, encoding="utf-8")
    sys.stdout.write(f"wrote {out}\n")
