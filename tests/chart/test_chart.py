"""The Helm chart (charts/shoal), checked offline: no cluster, no helm binary.

Each values set in charts/shoal/ci/ is linted (strict), rendered in-process by Helm's Go
SDK (helm-python-sdk), and every manifest is validated against the Kubernetes OpenAPI
schemas (kubernetes-validate, strict: no unknown fields) or, for the Prometheus Operator
kinds, against their CRD schemas kept in tests/chart/schemas/. Then the layout's promises
are asserted: one data StatefulSet per zone (+ one stateless where asked), node ids unique
across them, a PDB per StatefulSet, probes, zone affinity, advertised names, and a config
file plus environment that the broker's own config loader accepts for every pod.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from broker.cli import _parser
from broker.config import CONFIG_KEYS, load_config
from tests.gates import in_ci


def _import(name: str) -> Any:
    """The test extra's chart tools (`make test` installs them): skipped without them,
    failed under CI=true."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if in_ci():
            raise
        pytest.skip(f"{name} is not installed (make test installs it): {exc}", allow_module_level=True)


helm_python = _import("helm_python")
kubernetes_validate = _import("kubernetes_validate")
jsonschema = _import("jsonschema")
yaml = _import("yaml")

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "shoal"
VALUE_SETS = sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))
SCHEMAS = Path(__file__).resolve().parent / "schemas"
KUBERNETES_VERSION = "1.33.0"  # the oldest the chart targets is 1.31 (trafficDistribution)
RELEASE, NAMESPACE = "shoal", "kafka"


@functools.cache
def chart() -> Any:
    return helm_python.Chart.load(str(CHART))


def values_of(name: str) -> dict[str, Any]:
    return yaml.safe_load((CHART / "ci" / name).read_text()) or {}


def render(values: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Template path -> the manifests it rendered (NOTES.txt left out)."""
    out = chart().render(copy.deepcopy(values), name=RELEASE, namespace=NAMESPACE)
    return {
        path: [doc for doc in yaml.safe_load_all(text) if doc]
        for path, text in out.items()
        if not path.endswith("NOTES.txt")
    }


@functools.cache
def rendered(name: str) -> dict[str, list[dict[str, Any]]]:
    return render(values_of(name))


def manifests(name: str) -> list[dict[str, Any]]:
    return [doc for docs in rendered(name).values() for doc in docs]


def of_kind(name: str, kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests(name) if m["kind"] == kind]


def broker_sets(name: str) -> list[dict[str, Any]]:
    return [
        s for s in of_kind(name, "StatefulSet") if s["metadata"]["labels"]["app.kubernetes.io/component"] == "broker"
    ]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def container(sts: dict[str, Any]) -> dict[str, Any]:
    (broker,) = sts["spec"]["template"]["spec"]["containers"]
    return broker


def env_of(sts: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(sts)["env"]}


def config_toml(name: str) -> str:
    (cm,) = [c for c in of_kind(name, "ConfigMap") if c["metadata"]["name"].endswith("-config")]
    return cm["data"]["shoal.toml"]


# --- lint and schema validation of every manifest ------------------------------------------


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_lint_is_clean(value_set: str) -> None:
    report = helm_python.lint(str(CHART), values_of(value_set), strict=True, kube_version=f"v{KUBERNETES_VERSION}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # 1 = info ("icon is recommended")
    assert not problems and not report["errors"], report


def _strict(schema: Any) -> Any:
    """An OpenAPI schema from a CRD, made strict like kubectl's field validation: objects
    with declared properties accept no others (unless they preserve unknown fields)."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if (
            schema.get("type") == "object"
            and "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    return schema


@functools.cache
def crd_validator(kind: str) -> Any:
    schema = json.loads((SCHEMAS / f"{kind.lower()}-monitoring.coreos.com-v1.json").read_text())
    return jsonschema.Draft7Validator(_strict(schema))


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_manifest_validates(value_set: str) -> None:
    kinds = set()
    for manifest in manifests(value_set):
        kinds.add(manifest["kind"])
        if manifest["apiVersion"].startswith("monitoring.coreos.com/"):
            assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
            errors = sorted(crd_validator(manifest["kind"]).iter_errors(manifest), key=str)
            assert not errors, f"{manifest['kind']}: {[f'{list(e.path)}: {e.message}' for e in errors]}"
        else:
            kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
        assert manifest["metadata"]["namespace"] == NAMESPACE
    assert {"StatefulSet", "Service", "ConfigMap", "PodDisruptionBudget", "Pod"} <= kinds


def test_the_crd_schemas_catch_mistakes() -> None:
    """The kept CRD schemas are not vacuous: a misspelt field or a wrong type fails."""
    monitor = next(m for m in manifests("monitoring-values.yaml") if m["kind"] == "ServiceMonitor")
    bad = copy.deepcopy(monitor)
    bad["spec"]["endpoints"][0]["intervall"] = "15s"
    assert list(crd_validator("ServiceMonitor").iter_errors(bad))
    rule = next(m for m in manifests("monitoring-values.yaml") if m["kind"] == "PrometheusRule")
    bad = copy.deepcopy(rule)
    bad["spec"]["groups"] = [{"rules": []}]  # a group needs a name
    assert list(crd_validator("PrometheusRule").iter_errors(bad))


# --- the per-zone layout --------------------------------------------------------------------


def _zones(value_set: str) -> list[dict[str, Any]]:
    return values_of(value_set).get("zones") or chart().values["zones"]


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_one_data_statefulset_per_zone_and_one_stateless_where_asked(value_set: str) -> None:
    sets = {
        (s["metadata"]["labels"]["shoal.io/zone"], s["metadata"]["labels"]["shoal.io/role"]): s
        for s in broker_sets(value_set)
    }
    expected = set()
    for zone in _zones(value_set):
        expected.add((zone["name"], "data"))
        assert sets[(zone["name"], "data")]["spec"]["replicas"] == zone["brokers"]
        if zone.get("statelessBrokers", 0) > 0:
            expected.add((zone["name"], "stateless"))
            assert sets[(zone["name"], "stateless")]["spec"]["replicas"] == zone["statelessBrokers"]
    assert set(sets) == expected
    for (zone, role), sts in sets.items():
        assert sts["spec"]["podManagementPolicy"] == "Parallel"
        has_pvc = bool(sts["spec"].get("volumeClaimTemplates"))
        assert has_pvc == (role == "data"), f"{zone}/{role}: data brokers and only they have a data volume"
        env = env_of(sts)
        assert env["SHOAL_AZ"]["value"] == zone
        if role == "stateless":
            assert env["SHOAL_STATELESS"]["value"] == "true" and "SHOAL_DATA_DIR" not in env
        else:
            mounts = {m["name"]: m["mountPath"] for m in container(sts)["volumeMounts"]}
            assert env["SHOAL_DATA_DIR"]["value"].startswith(mounts["data"] + "/")


def _node_id_ranges(value_set: str) -> list[tuple[str, range]]:
    ranges = []
    for sts in broker_sets(value_set):
        base = int(env_of(sts)["NODE_ID_BASE"]["value"])
        ranges.append((sts["metadata"]["name"], range(base, base + sts["spec"]["replicas"])))
    return ranges


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_node_ids_do_not_overlap(value_set: str) -> None:
    taken: dict[int, str] = {}
    for name, ids in _node_id_ranges(value_set):
        for node_id in ids:
            assert node_id not in taken, f"node.id {node_id} in both {taken[node_id]} and {name}"
            taken[node_id] = name
    assert len(taken) == sum(z["brokers"] + z.get("statelessBrokers", 0) for z in _zones(value_set))


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_one_pdb_per_statefulset_selecting_exactly_its_pods(value_set: str) -> None:
    pdbs = of_kind(value_set, "PodDisruptionBudget")
    all_sets = of_kind(value_set, "StatefulSet")  # brokers and the bundled etcd
    for sts in all_sets:
        labels = sts["spec"]["template"]["metadata"]["labels"]
        mine = [p for p in pdbs if selects(p["spec"]["selector"]["matchLabels"], labels)]
        assert len(mine) == 1, f"{sts['metadata']['name']}: {len(mine)} PodDisruptionBudgets"
        (pdb,) = mine
        assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
        others = [s for s in all_sets if s is not sts]
        assert not any(
            selects(pdb["spec"]["selector"]["matchLabels"], o["spec"]["template"]["metadata"]["labels"]) for o in others
        )
    assert len(pdbs) == len(all_sets)


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_broker_pods(value_set: str) -> None:
    services = {s["metadata"]["name"]: s for s in of_kind(value_set, "Service")}
    zones = {z["name"]: z for z in _zones(value_set)}
    for sts in broker_sets(value_set):
        pod = sts["spec"]["template"]["spec"]
        broker = container(sts)
        zone = sts["metadata"]["labels"]["shoal.io/zone"]
        probes = {
            p: (broker[p]["httpGet"]["path"], broker[p]["httpGet"]["port"])
            for p in ("startupProbe", "readinessProbe", "livenessProbe")
        }
        assert probes == {
            "startupProbe": ("/readyz", "metrics"),
            "readinessProbe": ("/readyz", "metrics"),
            "livenessProbe": ("/healthz", "metrics"),
        }
        assert {p["name"]: p["containerPort"] for p in broker["ports"]} == {"kafka": 9092, "rpc": 9093, "metrics": 9464}
        # Pinned to its zone, spread over the zone's nodes.
        (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert term["matchExpressions"] == [
            {
                "key": "topology.kubernetes.io/zone",
                "operator": "In",
                "values": [zones[zone].get("topologyValue") or zone],
            }
        ]
        assert [c["topologyKey"] for c in pod["topologySpreadConstraints"]] == ["kubernetes.io/hostname"]
        assert pod["enableServiceLinks"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
        assert broker["securityContext"]["readOnlyRootFilesystem"] is True
        assert broker["securityContext"]["allowPrivilegeEscalation"] is False
        assert pod["terminationGracePeriodSeconds"] >= 90  # 60 s commit deadline + 30 s controlled shutdown
        # Advertised: the pod's own name in the StatefulSet's headless Service.
        headless = services[sts["spec"]["serviceName"]]
        assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
        assert selects(headless["spec"]["selector"], sts["spec"]["template"]["metadata"]["labels"])
        assert {p["name"] for p in headless["spec"]["ports"]} == {"kafka", "rpc", "metrics"}
        domain = f"{headless['metadata']['name']}.{NAMESPACE}.svc.cluster.local"
        env = env_of(sts)
        assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert env["SHOAL_ADVERTISE"]["value"] == f"$(POD_NAME).{domain}:9092"
        assert env["SHOAL_RPC_ADVERTISE"]["value"] == f"$(POD_NAME).{domain}:9093"


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_bootstrap_services(value_set: str) -> None:
    services = {s["metadata"]["name"]: s for s in of_kind(value_set, "Service")}
    pods = [s["spec"]["template"]["metadata"]["labels"] for s in broker_sets(value_set)]
    fullname = values_of(value_set).get("fullnameOverride", RELEASE)
    for zone in _zones(value_set):
        bootstrap = services[f"{fullname}-{zone['name']}"]
        assert bootstrap["spec"]["type"] == "ClusterIP"
        assert {p["name"]: p["port"] for p in bootstrap["spec"]["ports"]} == {"kafka": 9092, "metrics": 9464}
        selected = [p for p in pods if selects(bootstrap["spec"]["selector"], p)]
        assert selected and all(p["shoal.io/zone"] == zone["name"] for p in selected)
        assert len(selected) == 1 + (zone.get("statelessBrokers", 0) > 0)  # its data and stateless pods
    shared = services[fullname]
    assert shared["spec"]["trafficDistribution"] == "PreferClose"
    assert all(selects(shared["spec"]["selector"], p) for p in pods)


# --- what the brokers are started with ------------------------------------------------------


def _started_with(sts: dict[str, Any], ordinal: int) -> tuple[list[str], dict[str, str]]:
    """The argv and SHOAL_* environment pod `ordinal` of `sts` starts `shoal` with: Kubernetes'
    $(VAR) expansion of the env, then the container's own shell (exec replaced by echo)."""
    pod_name = f"{sts['metadata']['name']}-{ordinal}"
    env = {"POD_NAME": pod_name, "PATH": "/usr/bin:/bin"}
    for item in container(sts)["env"]:
        if "value" in item:
            env[item["name"]] = item["value"].replace("$(POD_NAME)", pod_name)
    broker = container(sts)
    assert broker["command"] == ["sh", "-c"]
    (script,) = broker["args"]
    assert script.startswith("exec shoal broker ")
    out = subprocess.run(
        ["sh", "-c", "echo " + script[len("exec ") :]], env=env, capture_output=True, text=True, check=True
    )
    argv = shlex.split(out.stdout)
    return argv[1:], {k: v for k, v in env.items() if k.startswith("SHOAL_")}


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_the_broker_accepts_the_config_of_every_pod(value_set: str, tmp_path: Path) -> None:
    text = config_toml(value_set)
    table = tomllib.loads(text)
    unknown = sorted(k for k in table if k not in CONFIG_KEYS)
    assert not unknown, f"not broker config keys: {unknown}"
    for key, value in (values_of(value_set).get("config") or {}).items():
        assert table[key] == value
    config_file = tmp_path / "shoal.toml"
    config_file.write_text(text)
    for sts in broker_sets(value_set):
        base = int(env_of(sts)["NODE_ID_BASE"]["value"])
        for ordinal in range(sts["spec"]["replicas"]):
            argv, environ = _started_with(sts, ordinal)
            args = _parser().parse_args(argv)
            assert args.config == "/etc/shoal/shoal.toml"
            config = load_config(str(config_file), {"node.id": args.node_id}, environ)
            assert config.node_id == base + ordinal
            assert config.az == sts["metadata"]["labels"]["shoal.io/zone"]
            assert config.stateless == (sts["metadata"]["labels"]["shoal.io/role"] == "stateless")
            assert config.metadata.startswith("etcd://") and config.object_store.startswith("s3://")
            assert config.advertised[0].startswith(f"{sts['metadata']['name']}-{ordinal}.")
            assert config.listen == "0.0.0.0:9092" and config.metrics_listen == "0.0.0.0:9464"


def test_metadata_points_at_etcd() -> None:
    bundled = tomllib.loads(config_toml("one-zone-values.yaml"))["metadata"]
    assert bundled == f"etcd://shoal-etcd-0.shoal-etcd-headless.{NAMESPACE}.svc.cluster.local:2379/shoal"
    external = tomllib.loads(config_toml("external-etcd-tls-values.yaml"))["metadata"]
    assert (
        external
        == "etcd://etcd-0.etcd.infra.svc:2379,etcd-1.etcd.infra.svc:2379,etcd-2.etcd.infra.svc:2379/clusters/prod"
    )
    assert not [s for s in of_kind("external-etcd-tls-values.yaml", "StatefulSet") if "etcd" in s["metadata"]["name"]]
    for sts in broker_sets("external-etcd-tls-values.yaml"):
        volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
        assert volumes["etcd-tls"]["secret"]["secretName"] == "etcd-client-tls"


def test_bundled_etcd_is_spread_over_the_zones() -> None:
    (etcd,) = [
        s for s in of_kind("three-zones-stateless-values.yaml", "StatefulSet") if s["metadata"]["name"] == "shoal-etcd"
    ]
    assert etcd["spec"]["replicas"] == 3
    spec = etcd["spec"]["template"]["spec"]
    assert spec["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    assert spec["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "DoNotSchedule"
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"][0]["values"] == ["eu-west-1a", "eu-west-1b", "eu-west-1c"]
    command = etcd["spec"]["template"]["spec"]["containers"][0]["command"]
    (initial,) = [c for c in command if c.startswith("--initial-cluster=")]
    assert initial.count("=http://") == 3


def test_credentials_from_a_secret_or_the_service_account() -> None:
    env = env_of(broker_sets("three-zones-stateless-values.yaml")[0])
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "shoal-s3", "key": "access-key"}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "shoal-s3", "key": "secret-key"}
    (account,) = of_kind("cloud-identity-values.yaml", "ServiceAccount")
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/shoal"}
    for sts in broker_sets("cloud-identity-values.yaml"):
        assert sts["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
        assert "AWS_ACCESS_KEY_ID" not in env_of(sts)
    table = tomllib.loads(config_toml("cloud-identity-values.yaml"))
    assert table["tiering.spark.submit"].startswith("spark-submit --master spark://")
    assert table["tiering.spark.master"] == "local[4]"


def test_a_config_change_rolls_the_pods() -> None:
    base = values_of("one-zone-values.yaml")

    def checksums(values: dict[str, Any]) -> set[str]:
        sets = [
            s
            for docs in render(values).values()
            for s in docs
            if s["kind"] == "StatefulSet" and "shoal.io/role" in s["metadata"]["labels"]
        ]
        return {s["spec"]["template"]["metadata"]["annotations"]["checksum/config"] for s in sets}

    before = checksums(base)
    assert len(before) == 1 and before == checksums(base)
    changed = copy.deepcopy(base)
    changed["config"]["num.partitions"] = 12
    after = checksums(changed)
    assert len(after) == 1 and after != before
    moved = copy.deepcopy(base)
    moved["objectStore"]["url"] = "s3://another-bucket/shoal?region=eu-west-1"
    assert checksums(moved) not in (before, after)


# --- monitoring ---------------------------------------------------------------------------


def test_monitoring_objects() -> None:
    (monitor,) = of_kind("monitoring-values.yaml", "ServiceMonitor")
    headless = [
        s
        for s in of_kind("monitoring-values.yaml", "Service")
        if s["spec"].get("clusterIP") == "None"
        and s["metadata"]["labels"].get("app.kubernetes.io/component") == "broker"
    ]
    scraped = [
        s
        for s in of_kind("monitoring-values.yaml", "Service")
        if selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
    ]
    assert scraped == headless and len(headless) == len(broker_sets("monitoring-values.yaml"))  # every pod once
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics" and endpoint["interval"] == "15s"
    # The alert rules select job="shoal" (charts/shoal/files/alerts.yaml).
    assert endpoint["relabelings"] == [{"targetLabel": "job", "replacement": "shoal"}]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (rule,) = of_kind("monitoring-values.yaml", "PrometheusRule")
    alerts = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert rule["spec"] == {"groups": alerts["groups"]}
    (dashboard,) = [
        c for c in of_kind("monitoring-values.yaml", "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")
    ]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "Kafka"}
    assert json.loads(dashboard["data"]["shoal.json"]) == json.loads((CHART / "files" / "dashboard.json").read_text())
    for value_set in VALUE_SETS:
        if value_set != "monitoring-values.yaml":
            assert not of_kind(value_set, "ServiceMonitor") and not of_kind(value_set, "PrometheusRule")


def test_helm_test_pod_visits_every_zone() -> None:
    (pod,) = of_kind("three-zones-stateless-values.yaml", "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (test,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in test["env"]}
    services = {s["metadata"]["name"] for s in of_kind("three-zones-stateless-values.yaml", "Service")}
    zones = dict(item.split("=", 1) for item in env["ZONES"].split())
    assert list(zones) == ["a", "b", "c"]
    assert all(address.rsplit(":", 1)[0] in services for address in zones.values())
    assert env["REPLICATION_FACTOR"] == "3"
    assert test["command"] == ["python", "-c"]
    compile(test["args"][0], "helm-test", "exec")  # the inline script is valid Python
    assert "shoal_az={zone}" in test["args"][0]


# --- refusals -------------------------------------------------------------------------------

GOOD = {"objectStore": {"url": "s3://bucket/shoal?region=eu-west-1"}}


def _with(patch: dict[str, Any]) -> dict[str, Any]:
    return {**copy.deepcopy(GOOD), **patch}


@pytest.mark.parametrize(
    "patch, names",
    [
        ({"zones": [{"brokers": 1, "nodeIdBase": 0}]}, ["/zones/0", "missing property 'name'"]),
        ({"zones": [{"name": "a", "brokers": -1, "nodeIdBase": 0}]}, ["/zones/0/brokers", "minimum"]),
        (
            {"zones": [{"name": "a", "brokers": 1, "statelessBrokers": "2", "nodeIdBase": 0}]},
            ["/zones/0/statelessBrokers"],
        ),
        ({"zones": [{"name": "a", "brokers": 1, "nodeIdBase": -5}]}, ["/zones/0/nodeIdBase"]),
        ({"zones": [{"name": "a", "brokers": 1, "nodeIdBase": 1.5}]}, ["/zones/0/nodeIdBase"]),
        ({"zones": [{"name": "Zone_A", "brokers": 1, "nodeIdBase": 0}]}, ["/zones/0/name", "pattern"]),
        ({"zones": [{"name": "a", "replicas": 1, "brokers": 1, "nodeIdBase": 0}]}, ["/zones/0", "'replicas'"]),
        ({"zones": []}, ["/zones", "minItems"]),
        ({"bogus": 1}, ["'bogus' not allowed"]),
        ({"config": {"log": {"retention.ms": 1}}}, ["/config/log"]),
        ({"config": {"Log.Retention": 1}}, ["invalid propertyName 'Log.Retention'"]),
        ({"objectStore": {"url": "file:///var/lib/shoal/objects"}}, ["/objectStore/url"]),
        ({"etcd": {"bundled": {"enabled": False}}}, ["/etcd/external/endpoints"]),
        ({"etcd": {"bundled": {"enabled": True, "replicas": 2}}}, ["/etcd/bundled/replicas"]),
        (
            {
                "etcd": {
                    "bundled": {"enabled": False},
                    "external": {"endpoints": ["etcd:2379"], "tls": {"enabled": True}},
                }
            },
            ["/etcd/external/tls/secretName"],
        ),
        (
            {"etcd": {"bundled": {"enabled": False}, "external": {"endpoints": ["etcd"]}}},
            ["/etcd/external/endpoints/0"],
        ),
        ({"podDisruptionBudget": {"enabled": True, "maxUnavailable": 0}}, ["/podDisruptionBudget/maxUnavailable"]),
        ({"updateStrategy": "Recreate"}, ["/updateStrategy"]),
    ],
)
def test_the_schema_refuses_bad_values(patch: dict[str, Any], names: list[str]) -> None:
    with pytest.raises(helm_python.HelmValuesError) as refused:
        chart().validate_schema(_with(patch))
    for name in names:
        assert name in str(refused.value)


@pytest.mark.parametrize(
    "patch, message",
    [
        (
            {"zones": [{"name": "a", "brokers": 3, "nodeIdBase": 0}, {"name": "b", "brokers": 1, "nodeIdBase": 2}]},
            "node ids overlap: data brokers of zone a take 0..2 and data brokers of zone b take 2..2",
        ),
        (
            {"zones": [{"name": "a", "brokers": 1, "statelessBrokers": 2, "nodeIdBase": 0, "statelessNodeIdBase": 0}]},
            "node ids overlap: data brokers of zone a take 0..0 and stateless brokers of zone a take 0..1",
        ),
        (
            {
                "zones": [
                    {"name": "a", "brokers": 1, "statelessBrokers": 1, "nodeIdBase": 0},
                    {"name": "b", "brokers": 1, "nodeIdBase": 500},
                ]
            },
            "stateless brokers of zone a take 500..500 and data brokers of zone b take 500..500",
        ),
        (
            {"zones": [{"name": "a", "brokers": 1, "nodeIdBase": 0}, {"name": "a", "brokers": 1, "nodeIdBase": 10}]},
            'zone name "a" appears twice',
        ),
        ({"config": {"node.id": 7}}, "config.node.id: the chart sets this key"),
        ({"config": {"object.store": "s3://x/y"}}, "config.object.store: the chart sets this key from objectStore.url"),
        ({"objectStore": {"url": ""}}, "objectStore.url is required"),
    ],
)
def test_rendering_refuses_what_the_schema_cannot_see(patch: dict[str, Any], message: str) -> None:
    with pytest.raises(helm_python.HelmRenderError, match=re.escape(message)):
        chart().render(_with(patch), name=RELEASE, namespace=NAMESPACE)


def test_a_zone_can_have_no_data_brokers_and_ids_stay_disjoint() -> None:
    out = render(
        _with(
            {"zones": [{"name": "a", "brokers": 0, "statelessBrokers": 2, "nodeIdBase": 0, "statelessNodeIdBase": 0}]}
        )
    )
    sets = [
        d
        for docs in out.values()
        for d in docs
        if d["kind"] == "StatefulSet" and "shoal.io/role" in d["metadata"]["labels"]
    ]
    assert sorted((s["metadata"]["labels"]["shoal.io/role"], s["spec"]["replicas"]) for s in sets) == [
        ("data", 0),
        ("stateless", 2),
    ]


# --- the image ------------------------------------------------------------------------------


def test_dockerfile() -> None:
    """Static checks only: no docker engine here to build it."""
    lines = (ROOT / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    instructions = [line.strip().split(None, 1) for line in lines if line.strip() and not line.strip().startswith("#")]
    ops = [op.upper() for op, *_ in instructions]
    args = {op.upper(): rest[0] if rest else "" for op, *rest in instructions}  # the last of each
    assert args["FROM"].startswith("python:3.11-slim")
    assert "ADD" not in ops  # COPY only: no remote URLs, no archive unpacking
    user = args["USER"].split(":")[0]
    assert user not in ("root", "0") and ops.index("USER") > max(i for i, op in enumerate(ops) if op == "RUN")
    assert json.loads(args["ENTRYPOINT"]) == ["shoal"] and json.loads(args["CMD"]) == ["broker"]
    assert set(args["EXPOSE"].split()) == {"9092", "9093", "9464"}
    for op, rest in ((op, rest) for op, *rest in instructions if op.upper() == "COPY"):
        *sources, _ = rest[0].split()
        for source in sources:
            assert (ROOT / source).exists(), source
            assert not re.search(r"(secret|credential|\.env$|\.pem$|\.key$)", source, re.I), source
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "data"} <= ignored and ({"tests"} & ignored or {"tests/js/node_modules"} & ignored)
    assert "pip install" in args["RUN"] and "TIERING" in (ROOT / "Dockerfile").read_text()
