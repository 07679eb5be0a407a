"""The Kubernetes manifests under ``deploy/kubernetes`` are valid against the
Kubernetes schemas (kubernetes-validate, offline) and the Prometheus operator's
(its CRD schemas, vendored under ``schemas/``), run lockwatch as the Dockerfile
does, and alert with exactly the bundled rules of ``alerts/``.

``python -m tests.integration.test_deploy`` writes prometheusrule.yaml again
after the rules change."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from dockerfile_parse import DockerfileParser

from lockwatch.commands.params import SHARD
from lockwatch.config.load import load_settings
from lockwatch.settings.sharding import Shard
from tests.fixtures.paths import ROOT
from tests.fixtures.prometheus import binary

MANIFESTS = ROOT / "deploy" / "kubernetes"
FLEET = MANIFESTS / "fleet"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "lockwatch-fleet.yml"
SCHEMAS = Path(__file__).parent / "schemas"
KUBERNETES_VERSION = "1.31.0"
RELEASE = "kube-prometheus-stack"  # the Helm release the manifests' release label names
RULE_HEADER = """\
# Made from alerts/lockwatch.rules.yml: python -m tests.integration.test_deploy
# writes it again, and the tests check the two agree.
"""


def prometheus_rule() -> dict[str, Any]:
    rules = yaml.safe_load((ROOT / "alerts" / "lockwatch.rules.yml").read_text(encoding="utf-8"))
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "lockwatch",
            # kube-prometheus-stack's Prometheus selects rules by it (kustomization.yaml)
            "labels": {"app.kubernetes.io/name": "lockwatch", "release": RELEASE},
        },
        "spec": {"groups": rules["groups"]},
    }


def crd_schema(kind: str) -> dict[str, Any]:
    """The vendored CRD schema; Go's regular expressions may put ``(?i)`` after
    ``^``, which Python's want first."""
    text = (SCHEMAS / f"{kind.lower()}.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text.replace('"^(?i)', '"(?i)^'))
    return schema


def documents(directory: Path = MANIFESTS) -> dict[str, dict[str, Any]]:
    """Every manifest the kustomization lists, by kind."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    found: dict[str, dict[str, Any]] = {}
    for name in kustomization["resources"]:
        for document in yaml.safe_load_all((directory / name).read_text(encoding="utf-8")):
            found[document["kind"]] = document
    return found


@pytest.mark.parametrize("directory", [MANIFESTS, FLEET], ids=["single", "fleet"])
def test_the_kustomization_lists_every_manifest(directory: Path) -> None:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    files = {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)


@pytest.mark.parametrize("kind", ["ConfigMap", "Deployment", "Service"])
def test_the_core_manifests_are_valid_kubernetes(kind: str) -> None:
    kubernetes_validate.validate(documents()[kind], KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("kind", ["ConfigMap", "StatefulSet", "Service"])
def test_the_fleet_manifests_are_valid_kubernetes(kind: str) -> None:
    kubernetes_validate.validate(documents(FLEET)[kind], KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    ("directory", "kind"),
    [(MANIFESTS, "ServiceMonitor"), (MANIFESTS, "PrometheusRule"), (FLEET, "ServiceMonitor")],
)
def test_the_operator_manifests_are_valid_against_its_crds(directory: Path, kind: str) -> None:
    schema = crd_schema(kind)
    document = documents(directory)[kind]
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


def patched(directory: Path) -> dict[str, dict[str, Any]]:
    """The manifests with the kustomization's JSON patches applied (the
    ``replace`` ops it uses: the path must exist, as kustomize insists)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    found = documents(directory)
    for entry in kustomization.get("patches", []):
        target = entry["target"]
        for document in found.values():
            group, _, version = document["apiVersion"].rpartition("/")
            if (group, version) != (target.get("group", ""), target["version"]):
                continue
            for op in yaml.safe_load(entry["patch"]):
                assert op["op"] == "replace", op
                *parents, last = op["path"].strip("/").split("/")
                node = document
                for part in parents:
                    node = node[part]
                assert last in node, f"{document['kind']} has no {op['path']} to replace"
                node[last] = op["value"]
    return found


@pytest.mark.parametrize("directory", [MANIFESTS, FLEET], ids=["single", "fleet"])
def test_the_operators_resources_carry_the_release_label_kube_prometheus_stack_selects(
    directory: Path,
) -> None:
    """kube-prometheus-stack's Prometheus takes only ServiceMonitors and
    PrometheusRules labelled release: <its Helm release>; the kustomization
    sets it in one place."""
    found = patched(directory)
    operators = {k for k, d in found.items() if d["apiVersion"].startswith("monitoring.coreos")}
    assert operators == ({"ServiceMonitor", "PrometheusRule"} & set(found))
    for kind, document in found.items():
        labels = document["metadata"].get("labels", {})
        assert (labels.get("release") == RELEASE) == (kind in operators), kind


def test_an_overlay_names_another_helm_release(tmp_path: Path) -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text(encoding="utf-8"))
    (patch,) = kustomization["patches"]
    patch["patch"] = patch["patch"].replace(f"value: {RELEASE}", "value: monitoring")
    for name in kustomization["resources"]:
        (tmp_path / name).write_bytes((MANIFESTS / name).read_bytes())
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    found = patched(tmp_path)
    assert found["ServiceMonitor"]["metadata"]["labels"]["release"] == "monitoring"
    assert found["PrometheusRule"]["metadata"]["labels"]["release"] == "monitoring"


def readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split(f"\n### {title}\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]


def test_the_readme_builds_the_image_the_manifests_run_before_applying_them() -> None:
    """No registry holds lockwatch:latest: the README builds it first."""
    commands = [
        line.strip()
        for line in readme_section("Kubernetes")
        .split("```sh", 1)[1]
        .split("```", 1)[0]
        .splitlines()
    ]
    images = {
        documents()["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"],
        documents(FLEET)["StatefulSet"]["spec"]["template"]["spec"]["containers"][0]["image"],
    }
    (image,) = images
    built = next(i for i, c in enumerate(commands) if c.startswith(f"docker build -t {image} "))
    applied = next(i for i, c in enumerate(commands) if c.startswith("kubectl apply -k"))
    assert built < applied, commands


def test_the_prometheus_rule_is_the_bundled_rules() -> None:
    assert documents()["PrometheusRule"] == prometheus_rule()


def runs_as_the_dockerfile_says(pod: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The pod's one container, checked against the image's user, port and
    probes; with the Dockerfile's CMD, which the container's args must start with."""
    (container,) = pod["containers"]
    dockerfile = DockerfileParser(str(ROOT / "Dockerfile"))
    user = next(i["value"] for i in dockerfile.structure if i["instruction"] == "USER")
    assert pod["securityContext"]["runAsUser"] == int(user.split(":")[0])
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["ports"][0]["containerPort"] == 10057
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"
    cmd = next(i["value"] for i in dockerfile.structure if i["instruction"] == "CMD")
    command: list[str] = json.loads(cmd)
    assert container["args"][: len(command)] == command
    return container, command


def test_the_deployment_runs_the_image_as_the_dockerfile_does(tmp_path: Path) -> None:
    docs = documents()
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    container, command = runs_as_the_dockerfile_says(pod)
    assert container["args"] == command
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


def expand(arg: str, env: dict[str, str]) -> str:
    """``$(NAME)`` in a container's args, as the kubelet expands it."""
    return re.sub(r"\$\((\w+)\)", lambda found: env[found[1]], arg)


def test_each_pod_of_the_fleet_statefulset_runs_its_own_shard(tmp_path: Path) -> None:
    docs = documents(FLEET)
    statefulset = docs["StatefulSet"]
    pod = statefulset["spec"]["template"]["spec"]
    container, command = runs_as_the_dockerfile_says(pod)
    (shard_arg,) = [a for a in container["args"][len(command) :] if a.startswith("--shard=")]
    env = {e["name"]: e.get("value") for e in container["env"]}
    pod_name = next(e for e in container["env"] if e["name"] == "POD_NAME")
    assert pod_name["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    replicas = statefulset["spec"]["replicas"]
    shards = set()
    for ordinal in range(replicas):
        name = f"{statefulset['metadata']['name']}-{ordinal}"
        value = expand(shard_arg.removeprefix("--shard="), {**env, "POD_NAME": name})
        shards.add(SHARD.convert(value, None, None))
    assert shards == {Shard(i, replicas) for i in range(replicas)}
    # the headless service and the monitor pick the shard pods, by the pod's labels
    pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert statefulset["spec"]["serviceName"] == docs["Service"]["metadata"]["name"]
    assert docs["Service"]["spec"]["selector"].items() <= pod_labels.items()
    monitor = docs["ServiceMonitor"]["spec"]
    assert (
        monitor["selector"]["matchLabels"].items() <= docs["Service"]["metadata"]["labels"].items()
    )
    assert "lockwatch.dev/replica" in pod_labels

    # The config loads, its password and its file_sd list where the pod mounts them.
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    data = docs["ConfigMap"]["data"]
    (tmp_path / "password").write_text("pw\n")
    (tmp_path / "postgres.json").write_text(data["postgres.json"])
    secrets = next(path for path, m in mounts.items() if m["name"] == "monitor")
    sd_path = next(path for path, m in mounts.items() if m.get("subPath") == "postgres.json")
    config = data["lockwatch.yml"].replace(secrets + "/", f"{tmp_path}/")
    (tmp_path / "lockwatch.yml").write_text(
        config.replace(sd_path, str(tmp_path / "postgres.json"))
    )
    settings = load_settings(tmp_path / "lockwatch.yml")
    assert settings.targets == () and settings.auth_modules[0].password == "pw"
    (source,) = settings.target_sources
    parsed = json.loads(data["postgres.json"])
    assert source.file == tmp_path / "postgres.json" and len(parsed) == 2


def relabelled(rule: dict[str, Any], value: str) -> str | None:
    """What a Prometheus replace rule makes of one source value (anchored; $1)."""
    found = re.fullmatch(rule["regex"], value)
    return None if found is None else rule["replacement"].replace("$1", found[1])


def test_the_prometheus_config_labels_each_scrape_with_its_shard_and_replica(
    tmp_path: Path,
) -> None:
    """promtool accepts the scrape config. Debian's promtool is built without
    Kubernetes discovery, so the check runs with kubernetes_sd_configs swapped
    for file_sd_configs; everything else is checked as written."""
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text(encoding="utf-8"))
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "lockwatch"  # the bundled rules expect it
    assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}]
    job["file_sd_configs"] = [{"files": [str(tmp_path / "pods.json")]}]
    (tmp_path / "lockwatch.rules.yml").write_text(
        (ROOT / "alerts" / "lockwatch.rules.yml").read_text(encoding="utf-8")
    )
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    checked = subprocess.run(
        [binary("promtool"), "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rules = {
        rule["target_label"]: rule for rule in job["relabel_configs"] if "target_label" in rule
    }
    statefulset = documents(FLEET)["StatefulSet"]
    replica_label = "lockwatch.dev/replica"
    assert statefulset["spec"]["template"]["metadata"]["labels"][replica_label] == "a"
    assert rules["replica"]["source_labels"] == [
        "__meta_kubernetes_pod_label_lockwatch_dev_replica"
    ]
    # two replicas of a shard scrape as the same instance
    assert relabelled(rules["instance"], "lockwatch-a-12") == "shard-12"
    assert relabelled(rules["instance"], "lockwatch-b-12") == "shard-12"
    monitor_rules = documents(FLEET)["ServiceMonitor"]["spec"]["endpoints"][0]["relabelings"]
    instance_rule = next(rule for rule in monitor_rules if rule["targetLabel"] == "instance")
    assert (instance_rule["regex"], instance_rule["replacement"]) == (
        rules["instance"]["regex"],
        rules["instance"]["replacement"],
    )
    # alerts leave without the labels replicas differ in (replica, and the incident id
    # each numbers apart): Alertmanager sees one alert per shard's alert
    assert {"action": "labeldrop", "regex": "replica|incident"} in config["alerting"][
        "alert_relabel_configs"
    ]


if __name__ == "__main__":
    out = MANIFESTS / "prometheusrule.yaml"
    text = yaml.safe_dump(prometheus_rule(), sort_keys=False, allow_unicode=True, width=100)
    out.write_text(RULE_HEADER + text, encoding="utf-8")
    sys.stdout.write(f"wrote {out}\n")
