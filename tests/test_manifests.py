"""deploy/: the base and each overlay, rendered as kustomize would, are valid against the
Kubernetes schemas (kubernetes-validate), the operators' custom resources carry their required
fields, and the pieces agree with each other and with the code (topics, ports, secrets, labels)."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from prometheus_client import REGISTRY

from kadence.dev.local_stack import SERVICES
from kadence.ops.cli import main, serve
from kadence.protocol import topics
from kadence.protocol.limits import MAX_RECORD_BYTES
from kadence.protocol.settings import TIME_SKIPPING
from services.history.service import CONSUMER_GROUP as HISTORY_GROUP
from services.history.service import REDISPATCHED
from services.matching.app import APP_ID as MATCHING_APP
from tests.custom_resources import CUSTOM_RESOURCE_SCHEMAS, GENERATED_SECRETS, cnpg_instance_pod_labels, strimzi_node_pod_labels
from tests.kustomize import Resource, render
from tests.network_policy import Pod, admits

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
UI = "kadence-ui"
OVERLAYS = ["dev", "prod", "one-process"]
# The workloads that run the services, by overlay: one per service, or `kadence server` pods.
# The overlays built on prod (three Kafka nodes, CloudNativePG): the others are dev's.
ON_PROD = {"prod", "one-process"}
SERVICE_WORKLOADS = {overlay: {f"kadence-{service}" for service in SERVICES} for overlay in OVERLAYS} | {"one-process": {"kadence-server"}}
# The oldest Kubernetes minor still in upstream support when this was written, and the newest schemas.
KUBERNETES_VERSIONS = ["1.32", kubernetes_validate.latest_version()]


def rendered(overlay: str) -> list[Resource]:
    """What an operator applies: the overlay, and the start Job (a kustomization of its own)."""
    return render(DEPLOY / "overlays" / overlay) + render(DEPLOY / "start-order")


def of_kind(resources: list[Resource], kind: str) -> list[Resource]:
    return [resource for resource in resources if resource["kind"] == kind]


def named(resources: list[Resource], kind: str, name: str) -> Resource:
    [resource] = [r for r in of_kind(resources, kind) if r["metadata"]["name"] == name]
    return resource


def pod_specs(resources: list[Resource]) -> dict[str, dict[str, Any]]:
    """Every pod template, by its owner's kind/name."""
    specs = {}
    for resource in resources:
        spec = resource.get("spec", {})
        if resource["kind"] in ("Deployment", "StatefulSet", "Job"):
            specs[f"{resource['kind']}/{resource['metadata']['name']}"] = spec["template"]
        elif resource["kind"] == "CronJob":
            specs[f"CronJob/{resource['metadata']['name']}"] = spec["jobTemplate"]["spec"]["template"]
    return specs


def config(resources: list[Resource]) -> dict[str, str]:
    return named(resources, "ConfigMap", "kadence-config")["data"]


@pytest.mark.parametrize("kustomization", [*(f"overlays/{overlay}" for overlay in OVERLAYS), "start-order"])
def test_the_renderer_agrees_with_kubectl_kustomize(kustomization: str) -> None:
    """Where kubectl is installed, its kustomize renders exactly what tests/kustomize.py does."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed here, so tests/kustomize.py is not compared with it")
    output = subprocess.run([kubectl, "kustomize", str(DEPLOY / kustomization)], capture_output=True, text=True, check=True).stdout

    def identity(resource: Resource) -> tuple[str, str]:
        return resource["kind"], resource["metadata"]["name"]

    assert sorted(render(DEPLOY / kustomization), key=identity) == sorted(yaml.safe_load_all(output), key=identity)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_resource_validates_against_its_schema(overlay: str) -> None:
    resources = rendered(overlay)
    for resource in resources:
        where = f"{overlay}: {resource['kind']}/{resource['metadata']['name']}"
        assert resource["metadata"].get("namespace") == "kadence" or resource["kind"] == "Namespace", where
        schema = CUSTOM_RESOURCE_SCHEMAS.get((resource["apiVersion"], resource["kind"]))
        if schema is not None:
            jsonschema.validate(resource, schema)
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(resource, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{where} is not a valid Kubernetes {version} resource: {exc.message} at {list(exc.path)}")


def test_the_validators_catch_what_they_should() -> None:
    """Guards against a validator that accepts everything (a typo'd field, a missing required one)."""
    workload = named(rendered("dev"), "StatefulSet", "kadence-history")
    workload["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(workload, KUBERNETES_VERSIONS[0], strict=True)
    topic = named(rendered("dev"), "KafkaTopic", "kadence-history")
    del topic["spec"]["partitions"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(topic, CUSTOM_RESOURCE_SCHEMAS[(topic["apiVersion"], "KafkaTopic")])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_topics_match_the_code(overlay: str) -> None:
    resources = rendered(overlay)
    settings = config(resources)
    declared = {topic["spec"]["topicName"]: topic["spec"] for topic in of_kind(resources, "KafkaTopic")}
    assert set(topics.RETENTION_MS) <= set(declared), "every topic the services create is declared"
    partitions = int(settings["KADENCE_PARTITIONS"])
    # Command partition p is answered on history partition p: the counts must be equal.
    assert declared[topics.COMMANDS]["partitions"] == declared[topics.HISTORY]["partitions"] == partitions
    assert declared[topics.HISTORY]["config"]["retention.ms"] == -1
    broker_config = named(resources, "Kafka", "kadence")["spec"]["kafka"]["config"]
    assert broker_config["message.max.bytes"] == broker_config["replica.fetch.max.bytes"] == MAX_RECORD_BYTES
    brokers = sum(pool["spec"]["replicas"] for pool in of_kind(resources, "KafkaNodePool") if "broker" in pool["spec"]["roles"])
    for name, spec in declared.items():
        created = topics.topic_config(name, spec["replicas"])  # min.insync.replicas 2 of 3, 1 of 1
        assert {key: str(spec["config"][key]) for key in created} == created, name
        assert spec["replicas"] == int(settings["KADENCE_REPLICATION_FACTOR"]) <= brokers, name
        if name.startswith("kadence.tq."):
            assert spec["partitions"] == int(settings["KADENCE_TASK_QUEUE_PARTITIONS"]), name
    if overlay in ON_PROD:
        assert {spec["replicas"] for spec in declared.values()} == {3}


def kadence_workloads(resources: list[Resource]) -> dict[str, Resource]:
    """The Deployments and StatefulSets running Kadence (not dev's Postgres), by name."""
    return {w["metadata"]["name"]: w for kind in ("Deployment", "StatefulSet") for w in of_kind(resources, kind)
            if w["spec"]["template"]["metadata"]["labels"].get("kadence.io/kafka-client") == "true"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_are_probed_budgeted_and_scraped(overlay: str) -> None:
    resources = rendered(overlay)
    port = int(config(resources)["KADENCE_HTTP_PORT"])
    deployments = {name: w for name, w in kadence_workloads(resources).items() if name != UI}  # the UI has a test of its own
    assert set(deployments) == SERVICE_WORKLOADS[overlay] | {"kadence-order-worker"}
    budgets = {b["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] for b in of_kind(resources, "PodDisruptionBudget")}
    services = {s["spec"]["selector"]["app.kubernetes.io/name"]: s for s in of_kind(resources, "Service")}
    [monitor] = of_kind(resources, "ServiceMonitor")
    for name, deployment in deployments.items():
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert {"name": "http", "containerPort": port} in container["ports"], name
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}, name
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}, name
        assert {"cpu", "memory"} <= set(container["resources"]["requests"]) and {"cpu", "memory"} <= set(container["resources"]["limits"])
        assert name in budgets, f"{name} has no PodDisruptionBudget"
        labels = services[name]["metadata"]["labels"]
        assert all(labels.get(key) == value for key, value in monitor["spec"]["selector"]["matchLabels"].items()), name
        assert [p["name"] for p in services[name]["spec"]["ports"]] == [monitor["spec"]["endpoints"][0]["port"]], name
    partitions = int(config(resources)["KADENCE_PARTITIONS"])
    scaled = {h["spec"]["scaleTargetRef"]["name"]: h["spec"] for h in of_kind(resources, "HorizontalPodAutoscaler")}
    assert set(scaled) == {"kadence-matching", "kadence-order-worker"} & (SERVICE_WORKLOADS[overlay] | {"kadence-order-worker"})
    assert all(spec["maxReplicas"] <= partitions for spec in scaled.values()), "instances beyond the partition count idle"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_ui_is_probed_and_reached_only_through_the_auth_proxy(overlay: str) -> None:
    """`kadence serve ui` on every interface, actions for requests with the proxy's user header,
    and a NetworkPolicy that admits only the proxy's pods: no one else can send that header."""
    resources = rendered(overlay)
    template = named(resources, "Deployment", UI)["spec"]["template"]
    [container] = template["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["args"] == ["serve", "ui"] and "ui" in serve.params[0].type.choices
    assert env["KADENCE_UI_HOST"] == "0.0.0.0" and env["KADENCE_UI_AUTH_PROXY_HEADER"]
    port = int(env["KADENCE_UI_PORT"])
    assert {"name": "http", "containerPort": port} in container["ports"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    service = named(resources, "Service", UI)
    assert service["spec"]["ports"] == [{"name": "http", "port": port, "targetPort": "http"}]
    policies = of_kind(resources, "NetworkPolicy")
    ui = Pod(NAMESPACE, template["metadata"]["labels"])
    assert admits(policies, UI_PROXY, ui, port)
    assert not admits(policies, STRANGER, ui, port) and not admits(policies, PROMETHEUS, ui, port)
    assert not admits(policies, Pod("default", UI_PROXY.labels), ui, port), "only the proxy of Kadence's namespace"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_partition_owners_are_static_members_with_their_pod_name_as_instance_id(overlay: str) -> None:
    """History, timer and visibility are StatefulSets: each pod's stable name is its group instance
    id, and their session timeout gives a restarted pod time to come back. Matching and the worker,
    autoscaled Deployments with no stable names, stay dynamic members."""
    resources = rendered(overlay)
    workloads = kadence_workloads(resources)
    static = SERVICE_WORKLOADS[overlay] - {"kadence-matching"}
    services = {s["metadata"]["name"] for s in of_kind(resources, "Service")}
    config_maps = {c["metadata"]["name"]: c["data"] for c in of_kind(resources, "ConfigMap")}
    for name, workload in workloads.items():
        [container] = workload["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container.get("env", [])}
        settings: dict[str, str] = {}
        for source in container["envFrom"]:  # later sources win, as in Kubernetes
            settings.update(config_maps[source["configMapRef"]["name"]])
        if name in static:
            assert workload["kind"] == "StatefulSet", name
            assert workload["spec"]["podManagementPolicy"] == "Parallel", name
            assert workload["spec"]["serviceName"] in services, name
            assert env["KADENCE_INSTANCE_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}, name
            # Longer than a pod's restart takes; the broker's bounds are 6 s to 30 min by default.
            assert 20_000 <= int(settings["KADENCE_SESSION_TIMEOUT_MS"]) <= 60_000, name
        else:
            assert workload["kind"] == "Deployment" and "KADENCE_INSTANCE_ID" not in env, name
            assert int(settings["KADENCE_SESSION_TIMEOUT_MS"]) < 20_000, f"{name}: a dead dynamic member is noticed sooner"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_run_unprivileged_and_reach_only_what_they_are_labelled_for(overlay: str) -> None:
    resources = rendered(overlay)
    [listener] = named(resources, "Kafka", "kadence")["spec"]["kafka"]["listeners"]
    kafka_peers = listener["networkPolicyPeers"][0]["podSelector"]["matchLabels"]
    [postgres_policy] = [p for p in of_kind(resources, "NetworkPolicy") if p["metadata"]["name"] == "kadence-postgres-clients"]
    postgres_peers = postgres_policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    postgres_pod_labels = [named(resources, "Cluster", "kadence-postgres")["spec"]["inheritedMetadata"]["labels"]] if overlay in ON_PROD \
        else [named(resources, "StatefulSet", "kadence-postgres")["spec"]["template"]["metadata"]["labels"]]
    postgres_selector = postgres_policy["spec"]["podSelector"]["matchLabels"]
    assert all(labels.get(k) == v for labels in postgres_pod_labels for k, v in postgres_selector.items()), "the policy selects Postgres"
    secrets = {s["metadata"]["name"] for s in of_kind(resources, "Secret")} | generated_secrets(resources)
    for owner, template in pod_specs(resources).items():
        pod = template["spec"]
        labels = template["metadata"]["labels"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0, owner
        # Service links would hand every pod KADENCE_KAFKA_BOOTSTRAP_* variables for Strimzi's Service.
        assert pod["enableServiceLinks"] is False, owner
        for volume in pod.get("volumes", []):
            assert volume.get("secret", {}).get("secretName", next(iter(secrets))) in secrets, f"{owner}: no Secret for {volume}"
        for container in pod["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, owner
            assert container["securityContext"]["capabilities"]["drop"] == ["ALL"], owner
            env = {e["name"]: e for e in container.get("env", [])}
            for variable in env.values():
                reference = variable.get("valueFrom", {}).get("secretKeyRef")
                assert reference is None or reference["name"] in secrets, f"{owner}: no Secret {reference}"
            if labels.get("app.kubernetes.io/part-of") != "kadence" or owner.endswith("kadence-postgres"):
                continue
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, owner
            # A pod with Kafka or Postgres settings must carry the label the NetworkPolicy admits.
            assert all(labels.get(k) == v for k, v in kafka_peers.items()), f"{owner} cannot reach Kafka"
            assert ("KADENCE_POSTGRES_DSN" in env) == all(labels.get(k) == v for k, v in postgres_peers.items()), owner
            assert "KADENCE_KAFKA_SASL_PASSWORD" in env, owner
            assert {"configMapRef": {"name": "kadence-config"}} in container["envFrom"], owner


def generated_secrets(resources: list[Resource]) -> set[str]:
    """Secrets the operators create from the custom resources present."""
    return {secret for resource in resources for secret in GENERATED_SECRETS.get(resource["kind"], lambda r: [])(resource)}


def test_the_start_job_and_the_audit_run_kadence_commands() -> None:
    resources = rendered("prod")
    [job] = of_kind(resources, "Job")
    [audit] = of_kind(resources, "CronJob")
    job_container = job["spec"]["template"]["spec"]["containers"][0]
    assert job_container["args"][:2] == ["workflow", "start"] and "--type=OrderWorkflow" in job_container["args"]
    assert "--request-id=$(JOB_NAME)" in job_container["args"], "a retried pod must not start a second run"
    audit_job = audit["spec"]["jobTemplate"]["spec"]
    assert audit_job["template"]["spec"]["containers"][0]["args"] == ["audit", "replay"]
    assert audit_job["backoffLimit"] == 0, "a violation fails the Job at once, it is not retried into silence"
    assert audit["spec"]["concurrencyPolicy"] == "Forbid"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_service_workload_runs_the_kadence_command_of_its_layout(overlay: str) -> None:
    """`kadence serve <service>` per service, or `kadence server` for them all: commands the CLI has."""
    workloads = kadence_workloads(rendered(overlay))
    for name in SERVICE_WORKLOADS[overlay]:
        [container] = workloads[name]["spec"]["template"]["spec"]["containers"]
        service = name.removeprefix("kadence-")
        assert container["args"] == (["server"] if service == "server" else ["serve", service]), name
        assert container["args"][0] in main.commands and (service == "server" or service in serve.params[0].type.choices), name


def test_alerts_watch_what_the_code_counts_and_each_has_a_runbook() -> None:
    [rules] = of_kind(rendered("prod"), "PrometheusRule")
    alerts = {rule["alert"]: rule for group in rules["spec"]["groups"] for rule in group["rules"]}
    assert {"KadenceAuditFailed", "KadenceTasksRedispatched"} <= set(alerts)
    assert f"{REDISPATCHED._name}_total" in alerts["KadenceTasksRedispatched"]["expr"]
    headings = {line.lstrip("#").strip().lower().replace(" ", "-").replace("`", "")
                for line in (DEPLOY.parent / "docs" / "operations.md").read_text().splitlines() if line.startswith("#")}
    for name, rule in alerts.items():
        page, anchor = rule["annotations"]["runbook"].split("#")
        assert page == "docs/operations.md" and anchor in headings, f"{name}: no heading for its runbook {anchor!r}"


def exported_metrics() -> set[str]:
    """Every series name the services' code can export (importing a service registers its metrics)."""
    for module in ("services.history.service", "services.matching.relay", "services.timer.firing", "services.visibility.retention",
                   "services.projection", "kadence.protocol.observability"):
        importlib.import_module(module)
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    return {metric.name + suffix for metric in REGISTRY.collect() for suffix in suffixes.get(metric.type, ("",))}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_grafana_dashboard_shows_what_the_code_exports_and_the_alerts_link_it(overlay: str) -> None:
    resources = rendered(overlay)
    [config_map] = [r for r in of_kind(resources, "ConfigMap") if r["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    dashboard = json.loads(config_map["data"]["kadence.json"])
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    shown = set(re.findall(r"\bkadence_[a-z_]+", " ".join(exprs)))
    exported = exported_metrics()
    assert shown <= exported, f"the dashboard queries series no service exports: {sorted(shown - exported)}"
    families = {name.removesuffix("_total").removesuffix("_bucket") for name in shown}
    kadence_series = {m for m in exported if m.startswith("kadence_") and m.endswith(("_total", "_seconds", "_lag", "_memory"))}
    missing = {m.removesuffix("_total") for m in kadence_series} - families
    assert not missing, f"exported metrics the dashboard does not show: {sorted(missing)}"
    assert all('namespace="$namespace"' in expr for expr in exprs)
    [rules] = of_kind(resources, "PrometheusRule")
    for group in rules["spec"]["groups"]:
        for rule in group["rules"]:
            assert rule["annotations"]["dashboard"] == f"/d/{dashboard['uid']}/kadence", rule["alert"]


def test_the_kafka_user_may_use_every_topic_and_group_kadence_does() -> None:
    resources = rendered("prod")
    assert named(resources, "Kafka", "kadence")["spec"]["kafka"]["authorization"]["type"] == "simple"
    acls = named(resources, "KafkaUser", "kadence")["spec"]["authorization"]["acls"]

    def allowed(kind: str, name: str, operation: str) -> bool:
        def matches(resource: dict[str, str]) -> bool:
            return name.startswith(resource["name"]) if resource["patternType"] == "prefix" else name == resource["name"]

        return any(acl["resource"]["type"] == kind and operation in acl["operations"] and matches(acl["resource"]) for acl in acls)

    used_topics = [*topics.RETENTION_MS, topics.task_queue_topic("any-queue", "activity"), f"{MATCHING_APP}-__assignor-__leader"]
    for topic in used_topics:
        assert all(allowed("topic", topic, op) for op in ("Create", "Describe", "Read", "Write")), topic
    groups = [HISTORY_GROUP, MATCHING_APP, topics.worker_group("any-queue", "workflow"), "kadence.visibility", "kadence.timer",
              "kadence.projections", "kadence-replies", "kadence-reader"]
    for group in groups:
        assert allowed("group", group, "Read"), group
    assert any(acl["resource"]["type"] == "cluster" and "IdempotentWrite" in acl["operations"] for acl in acls)


NAMESPACE = "kadence"
KUBE_DNS = Pod("kube-system", {"k8s-app": "kube-dns"})
CNPG_OPERATOR = Pod("cnpg-system", {"app.kubernetes.io/name": "cloudnative-pg"})
PROMETHEUS = Pod("monitoring", {"app.kubernetes.io/name": "prometheus"})
STRANGER = Pod(NAMESPACE, {"app.kubernetes.io/name": "debug"})  # any other pod in the namespace
UI_PROXY = Pod(NAMESPACE, {"app.kubernetes.io/name": "oauth2-proxy", "kadence.io/ui-proxy": "true"})


def kadence_pods(resources: list[Resource]) -> dict[str, tuple[Pod, bool]]:
    """Every pod running Kadence (services, worker, start Job, audit), with whether it uses Postgres."""
    pods = {}
    for owner, template in pod_specs(resources).items():
        labels = template["metadata"]["labels"]
        if labels.get("app.kubernetes.io/part-of") == "kadence" and labels.get("kadence.io/postgres") != "true":
            [container] = template["spec"]["containers"]
            uses_postgres = any(e["name"] == "KADENCE_POSTGRES_DSN" for e in container.get("env", []))
            pods[owner] = Pod(NAMESPACE, labels), uses_postgres
    return pods


def postgres_pods(resources: list[Resource], overlay: str) -> list[Pod]:
    if overlay in ON_PROD:
        cluster = named(resources, "Cluster", "kadence-postgres")
        return [Pod(NAMESPACE, cnpg_instance_pod_labels(cluster, role)) for role in ("primary", "replica")]
    return [Pod(NAMESPACE, named(resources, "StatefulSet", "kadence-postgres")["spec"]["template"]["metadata"]["labels"])]


def kafka_pods(resources: list[Resource]) -> list[Pod]:
    kafka = named(resources, "Kafka", "kadence")
    return [Pod(NAMESPACE, strimzi_node_pod_labels(kafka, pool)) for pool in of_kind(resources, "KafkaNodePool")]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_postgres_admits_its_clients_and_what_cloudnativepg_needs(overlay: str) -> None:
    """CloudNativePG documents its ports: 5432 Postgres, 8000 the instance manager's status API
    (the operator calls it, and from 1.27 so does the primary's isolation check, on the others),
    9187 the metrics."""
    resources = rendered(overlay)
    policies = of_kind(resources, "NetworkPolicy")
    instances = postgres_pods(resources, overlay)
    for instance in instances:
        for owner, (pod, uses_postgres) in kadence_pods(resources).items():
            assert admits(policies, pod, instance, 5432) == uses_postgres, f"{owner} -> Postgres {instance.labels}"
            assert not admits(policies, pod, instance, 8000), owner
        assert not admits(policies, STRANGER, instance, 5432)
    if overlay in ON_PROD:
        for instance in instances:
            assert admits(policies, CNPG_OPERATOR, instance, 8000) and admits(policies, CNPG_OPERATOR, instance, 5432)
            assert not admits(policies, Pod("default", CNPG_OPERATOR.labels), instance, 8000), "only the operator's namespace"
            assert admits(policies, PROMETHEUS, instance, 9187) and not admits(policies, PROMETHEUS, instance, 5432)
            for other in instances:  # WAL streaming, and the isolation check's calls
                assert admits(policies, other, instance, 5432) and admits(policies, other, instance, 8000), (other, instance)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kadence_pods_reach_dns_kafka_and_postgres_only(overlay: str) -> None:
    resources = rendered(overlay)
    policies = of_kind(resources, "NetworkPolicy")
    bootstrap_port = int(config(resources)["KADENCE_BOOTSTRAP_SERVERS"].rsplit(":", 1)[1])
    [listener] = named(resources, "Kafka", "kadence")["spec"]["kafka"]["listeners"]
    assert bootstrap_port == listener["port"]
    for policy in policies:
        for rule in policy["spec"].get("egress", []):
            assert rule.get("to") and rule.get("ports"), f"{policy['metadata']['name']}: an egress rule open to anything"
    elsewhere = [Pod("default", {}), Pod(NAMESPACE, {"strimzi.io/name": "kadence-entity-operator"}), STRANGER]
    for owner, (pod, uses_postgres) in kadence_pods(resources).items():
        assert admits(policies, pod, KUBE_DNS, 53, "UDP") and admits(policies, pod, KUBE_DNS, 53, "TCP"), owner
        assert not admits(policies, pod, KUBE_DNS, 443), owner
        for broker in kafka_pods(resources):
            assert admits(policies, pod, broker, bootstrap_port), f"{owner} cannot reach Kafka"
            assert not admits(policies, pod, broker, 9091), f"{owner} reaches the brokers' replication listener"
        for instance in postgres_pods(resources, overlay):
            assert admits(policies, pod, instance, 5432) == uses_postgres, owner
        for other in elsewhere:
            assert not any(admits(policies, pod, other, port) for port in (443, 5432, 6443, bootstrap_port)), (owner, other)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_pod_mounts_a_service_account_token(overlay: str) -> None:
    """Nothing deploy/ runs calls the Kubernetes API (the operators' own pods do, with their own accounts)."""
    for owner, template in pod_specs(rendered(overlay)).items():
        assert template["spec"].get("automountServiceAccountToken") is False, owner


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_manifest_can_switch_time_skipping_on(overlay: str) -> None:
    """A run's clock moves only on a history service started with KADENCE_TIME_SKIPPING=1, which
    test stacks alone set (docs/decisions/0006-time-skipping.md): no rendered manifest names it,
    as a container's variable, a ConfigMap's key or anything else, and no file under deploy/ does."""
    assert TIME_SKIPPING not in json.dumps(rendered(overlay))
    assert [path for path in DEPLOY.rglob("*") if path.is_file() and TIME_SKIPPING in path.read_text(errors="replace")] == []
