"""What deploy/'s custom resources must carry, as JSON schemas of their required fields and enums.

kubernetes-validate knows only the built-in kinds. These schemas are written from the operators'
CRDs (Strimzi kafka.strimzi.io/v1 as served from 0.49; CloudNativePG postgresql.cnpg.io/v1 and
the Barman Cloud plugin's barmancloud.cnpg.io/v1; prometheus-operator monitoring.coreos.com/v1)
for the fields deploy/ uses: what each CRD requires, plus what its operator rejects at admission
(a persistent-claim volume without a size, a Cluster without storage.size).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Schema = dict[str, Any]


def obj(required: dict[str, Schema], optional: dict[str, Schema] | None = None, *, closed: bool = False) -> Schema:
    """An object with these required (and optional) properties; `closed` refuses any other, which
    catches a misspelt field where the CRD lists every property."""
    schema: Schema = {"type": "object", "required": sorted(required), "properties": {**required, **(optional or {})}}
    if closed:
        schema["additionalProperties"] = False
    return schema


def enum(*values: Any) -> Schema:
    return {"enum": list(values)}


STRING: Schema = {"type": "string", "minLength": 1}
INTEGER: Schema = {"type": "integer"}
ANY: Schema = {}
LABELS: Schema = {"type": "object", "additionalProperties": {"type": "string"}}
NETWORK_POLICY_PEER: Schema = obj({}, {"podSelector": ANY, "namespaceSelector": ANY, "ipBlock": ANY}, closed=True)
CRON_WITH_SECONDS: Schema = {"type": "string", "pattern": r"^\S+( \S+){5}$"}
DURATION: Schema = {"type": "string", "pattern": r"^(0|(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?)$"}
SECRET_KEY: Schema = obj({"name": STRING, "key": STRING}, closed=True)


def resource(api_version: str, kind: str, spec: Schema, *, labels: Schema | None = None) -> Schema:
    metadata = obj({"name": STRING}, {"namespace": STRING, "annotations": LABELS, "labels": labels or LABELS})
    return obj({"apiVersion": {"const": api_version}, "kind": {"const": kind}, "metadata": metadata, "spec": spec}, closed=True)


STRIMZI = "kafka.strimzi.io/v1"
# Every Strimzi resource but the Kafka itself names its cluster in this label.
IN_CLUSTER = obj({"strimzi.io/cluster": STRING})

VOLUME = {
    "if": {"properties": {"type": {"const": "persistent-claim"}}},
    "then": {"required": ["size"]},
    **obj({"id": {"type": "integer", "minimum": 0}, "type": enum("ephemeral", "persistent-claim")},
          {"size": STRING, "class": STRING, "deleteClaim": {"type": "boolean"}, "kraftMetadata": enum("shared")}, closed=True),
}

KAFKA_NODE_POOL = resource(STRIMZI, "KafkaNodePool", obj(
    {
        "replicas": {"type": "integer", "minimum": 0},
        "roles": {"type": "array", "minItems": 1, "items": enum("controller", "broker")},
        "storage": obj({"type": enum("ephemeral", "persistent-claim", "jbod")},
                       {"volumes": {"type": "array", "items": VOLUME}, "size": STRING}),
    },
    {"resources": ANY, "jvmOptions": ANY, "template": ANY},
    closed=True,
), labels=IN_CLUSTER)

LISTENER = obj(
    {
        "name": {"type": "string", "pattern": "^[a-z0-9]{1,11}$"},
        "port": {"type": "integer", "minimum": 9092},
        "type": enum("internal", "route", "tlsroute", "loadbalancer", "nodeport", "ingress", "cluster-ip"),
        "tls": {"type": "boolean"},
    },
    {
        "authentication": obj({"type": enum("tls", "scram-sha-512", "custom")}),
        "networkPolicyPeers": {"type": "array", "items": NETWORK_POLICY_PEER},
        "configuration": ANY,
    },
    closed=True,
)

KAFKA = resource(STRIMZI, "Kafka", obj(
    {"kafka": obj(
        {"listeners": {"type": "array", "minItems": 1, "items": LISTENER}},
        {"version": STRING, "metadataVersion": STRING, "config": {"type": "object"},
         "authorization": obj({"type": enum("simple", "custom")}), "template": ANY, "rack": ANY, "metricsConfig": ANY, "logging": ANY},
        closed=True,
    )},
    {"entityOperator": obj({}, {"topicOperator": {"type": "object"}, "userOperator": {"type": "object"}}, closed=True),
     "clusterCa": ANY, "clientsCa": ANY, "cruiseControl": ANY, "kafkaExporter": ANY},
    closed=True,
))

KAFKA_TOPIC = resource(STRIMZI, "KafkaTopic", obj(
    {"topicName": STRING, "partitions": {"type": "integer", "minimum": 1}, "replicas": {"type": "integer", "minimum": 1, "maximum": 32767}},
    {"config": {"type": "object"}},
    closed=True,
), labels=IN_CLUSTER)

ACL = obj(
    {
        "resource": obj({"type": enum("topic", "group", "cluster", "transactionalId")},
                        {"name": STRING, "patternType": enum("literal", "prefix")}, closed=True),
        "operations": {"type": "array", "minItems": 1, "items": enum(
            "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "AlterConfigs", "DescribeConfigs",
            "IdempotentWrite", "All",
        )},
    },
    {"type": enum("allow", "deny"), "host": STRING},
    closed=True,
)

KAFKA_USER = resource(STRIMZI, "KafkaUser", obj(
    {"authentication": obj({"type": enum("tls", "tls-external", "scram-sha-512")}, {"password": ANY}, closed=True)},
    {"authorization": obj({"type": enum("simple"), "acls": {"type": "array", "items": ACL}}, closed=True), "quotas": ANY, "template": ANY},
    closed=True,
), labels=IN_CLUSTER)

CNPG = "postgresql.cnpg.io/v1"
POSTGRES_CLUSTER = resource(CNPG, "Cluster", obj(
    {
        "instances": {"type": "integer", "minimum": 1},
        # Not required by the CRD, but the admission webhook refuses a Cluster without a size.
        "storage": obj({"size": STRING}, {"storageClass": STRING}, closed=True),
    },
    {
        "imageName": STRING,
        "primaryUpdateStrategy": enum("unsupervised", "supervised"),
        "walStorage": obj({"size": STRING}, {"storageClass": STRING}, closed=True),
        "resources": ANY,
        "bootstrap": obj({}, {"initdb": obj({}, {"database": STRING, "owner": STRING, "secret": ANY}, closed=True)}, closed=True),
        "inheritedMetadata": obj({}, {"labels": LABELS, "annotations": LABELS}, closed=True),
        "plugins": {"type": "array", "items": obj({"name": STRING}, {"enabled": {"type": "boolean"}, "isWALArchiver": {"type": "boolean"},
                                                                     "parameters": LABELS}, closed=True)},
        "postgresql": ANY,
        "affinity": ANY,
    },
    closed=True,
))

SCHEDULED_BACKUP = resource(CNPG, "ScheduledBackup", {
    "if": {"properties": {"method": {"const": "plugin"}}},
    "then": {"required": ["pluginConfiguration"]},
    **obj(
        {"schedule": CRON_WITH_SECONDS, "cluster": obj({"name": STRING}, closed=True)},
        {"method": enum("barmanObjectStore", "volumeSnapshot", "plugin"),
         "pluginConfiguration": obj({"name": STRING}, {"parameters": LABELS}),
         "backupOwnerReference": enum("none", "self", "cluster"), "target": enum("primary", "prefer-standby"),
         "immediate": {"type": "boolean"}, "suspend": {"type": "boolean"}, "online": {"type": "boolean"}},
        closed=True,
    ),
})

OBJECT_STORE = resource("barmancloud.cnpg.io/v1", "ObjectStore", obj(
    {"configuration": obj({"destinationPath": STRING}, {
        "s3Credentials": obj({"accessKeyId": SECRET_KEY, "secretAccessKey": SECRET_KEY},
                             {"region": SECRET_KEY, "sessionToken": SECRET_KEY}),
        "wal": obj({}, {"compression": enum("bzip2", "gzip", "lz4", "snappy", "xz", "zstd"), "maxParallel": INTEGER}),
        "data": ANY, "endpointURL": STRING, "endpointCA": SECRET_KEY,
    }, closed=True)},
    {"retentionPolicy": {"type": "string", "pattern": r"^[1-9][0-9]*[dwm]$"}},
    closed=True,
))

MONITORING = "monitoring.coreos.com/v1"
SERVICE_MONITOR = resource(MONITORING, "ServiceMonitor", obj(
    {
        "selector": obj({}, {"matchLabels": LABELS, "matchExpressions": ANY}, closed=True),
        "endpoints": {"type": "array", "minItems": 1, "items": obj({}, {
            "port": STRING, "path": STRING, "interval": DURATION, "scrapeTimeout": DURATION, "scheme": enum("http", "https"),
        }, closed=True)},
    },
    {"namespaceSelector": ANY, "jobLabel": STRING},
    closed=True,
))

PROMETHEUS_RULE = resource(MONITORING, "PrometheusRule", obj({"groups": {"type": "array", "items": obj(
    {"name": STRING, "rules": {"type": "array", "items": {
        **obj({"expr": STRING}, {"alert": STRING, "record": STRING, "for": DURATION, "labels": LABELS, "annotations": LABELS}, closed=True),
        "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
    }}},
    {"interval": DURATION},
)}}, closed=True))

CUSTOM_RESOURCE_SCHEMAS: dict[tuple[str, str], Schema] = {
    (schema["properties"]["apiVersion"]["const"], schema["properties"]["kind"]["const"]): schema
    for schema in (KAFKA_NODE_POOL, KAFKA, KAFKA_TOPIC, KAFKA_USER, POSTGRES_CLUSTER, SCHEDULED_BACKUP, OBJECT_STORE,
                   SERVICE_MONITOR, PROMETHEUS_RULE)
}

# The Secrets an operator creates for a custom resource, which pods may reference.
GENERATED_SECRETS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "Kafka": lambda kafka: [f"{kafka['metadata']['name']}-cluster-ca-cert"],
    "KafkaUser": lambda user: [user["metadata"]["name"]],  # keys password and sasl.jaas.config
    "Cluster": lambda cluster: [f"{cluster['metadata']['name']}-app"],  # keys uri, username, password ...
}


# The labels an operator gives the pods it runs for a custom resource, which NetworkPolicies select.
def strimzi_node_pod_labels(kafka: dict[str, Any], pool: dict[str, Any]) -> dict[str, str]:
    """A KafkaNodePool's pods (the selector Strimzi reports in the pool's status.labelSelector)."""
    name = kafka["metadata"]["name"]
    return {"strimzi.io/cluster": name, "strimzi.io/kind": "Kafka", "strimzi.io/name": f"{name}-kafka",
            "strimzi.io/pool-name": pool["metadata"]["name"]}


def cnpg_instance_pod_labels(cluster: dict[str, Any], role: str) -> dict[str, str]:
    """A CloudNativePG Cluster's instance pods (`role` primary or replica), with its inheritedMetadata labels."""
    return {**cluster["spec"].get("inheritedMetadata", {}).get("labels", {}),
            "cnpg.io/cluster": cluster["metadata"]["name"], "cnpg.io/podRole": "instance", "cnpg.io/instanceRole": role}
