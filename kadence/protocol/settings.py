"""Settings read from the environment, with the embedded local defaults."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field


class SettingError(ValueError):
    """A required setting is missing or malformed; the message says which and how to fix it."""


# 1: the history service takes runs that skip time (docs/decisions/0006-time-skipping.md). Test
# stacks only: `kadence dev --time-skipping`, kadence.testing's environments; deploy/ never sets it.
TIME_SKIPPING = "KADENCE_TIME_SKIPPING"


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r} is not an integer; set it to a whole number or unset it (default {default})") from None


# Kubernetes' service links: a Service named kadence-kafka-bootstrap gives every pod
# KADENCE_KAFKA_BOOTSTRAP_SERVICE_HOST, ..._PORT, ..._PORT_9093_TCP and so on. They are not
# librdkafka properties (none ends so), so they are not passed through.
SERVICE_LINK = re.compile(r"_(SERVICE_HOST|SERVICE_PORT(_\w+)?|PORT(_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$")


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap_servers: str = "127.0.0.1:9092"
    partitions: int = 8
    task_queue_partitions: int = 8
    replication_factor: int = 1
    session_timeout_ms: int = 6000
    # Apache Kafka answers a long poll as soon as data arrives, so a long wait costs no latency and
    # keeps idle consumers cheap. The Tansu broker does not wake long polls: `kadence dev` on it uses 5 ms.
    fetch_wait_max_ms: int = 500
    # The projections off a workflow's critical path (the timer service, the visibility projector)
    # ask the broker to gather records this long before it answers: one fetch, and one Postgres
    # transaction, then carries many records instead of one each, and their CPU no longer crowds
    # the critical path (docs/performance.md, "Readers that batch"). 0: they fetch like everyone else.
    batching_fetch_wait_ms: int = 100
    # The same for matching's relay, shorter: a child's start and close, and signals and cancels
    # to other workflows, wait for it once each.
    relay_fetch_wait_ms: int = 20
    # Every hop of a workflow waits for it once, and librdkafka's timers make any linger above 0 cost
    # a hop 1.5-2 ms (docs/performance.md, "Producer linger"). At 0, records produced while a request
    # is in flight still go out together, so a loaded producer batches anyway.
    linger_ms: int = 0
    # group.instance.id of the services that own partitions (history, matching, timer, visibility):
    # stable per instance, e.g. the StatefulSet pod's name, so a restarted instance rejoins its
    # consumer group as the same static member and gets its partitions back without a rebalance.
    # Empty: dynamic membership (each start joins anew; what the Tansu broker needs).
    instance_id: str = ""
    # Passed to librdkafka as is: KADENCE_KAFKA_SECURITY_PROTOCOL=SASL_SSL -> security.protocol=SASL_SSL.
    client_config: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls) -> "KafkaSettings":
        passthrough = kafka_properties(os.environ)
        return cls(
            bootstrap_servers=os.environ.get("KADENCE_BOOTSTRAP_SERVERS", cls.bootstrap_servers),
            partitions=env_int("KADENCE_PARTITIONS", cls.partitions),
            task_queue_partitions=env_int("KADENCE_TASK_QUEUE_PARTITIONS", cls.task_queue_partitions),
            replication_factor=env_int("KADENCE_REPLICATION_FACTOR", cls.replication_factor),
            session_timeout_ms=env_int("KADENCE_SESSION_TIMEOUT_MS", cls.session_timeout_ms),
            fetch_wait_max_ms=env_int("KADENCE_FETCH_WAIT_MAX_MS", cls.fetch_wait_max_ms),
            batching_fetch_wait_ms=env_int("KADENCE_BATCHING_FETCH_WAIT_MS", cls.batching_fetch_wait_ms),
            relay_fetch_wait_ms=env_int("KADENCE_RELAY_FETCH_WAIT_MS", cls.relay_fetch_wait_ms),
            linger_ms=env_int("KADENCE_LINGER_MS", cls.linger_ms),
            instance_id=os.environ.get("KADENCE_INSTANCE_ID", cls.instance_id).strip(),
            client_config=passthrough,
        )


def kafka_properties(env: Mapping[str, str]) -> dict[str, str]:
    """The librdkafka properties the KADENCE_KAFKA_* variables set: KADENCE_KAFKA_SECURITY_PROTOCOL=SASL_SSL
    is security.protocol=SASL_SSL."""
    return {
        key.removeprefix("KADENCE_KAFKA_").lower().replace("_", "."): value
        for key, value in env.items()
        if key.startswith("KADENCE_KAFKA_") and not SERVICE_LINK.search(key)
    }


def postgres_dsn() -> str:
    dsn = os.environ.get("KADENCE_POSTGRES_DSN", "")
    if not dsn:
        raise SettingError(
            "KADENCE_POSTGRES_DSN is not set; set it to a libpq connection string, "
            "e.g. postgresql://kadence@localhost/kadence (`kadence dev` sets it for you)"
        )
    return dsn
