"""The broker of the local stack (`kadence dev`, the tests, the benchmarks).

Apache Kafka when this machine can run it (Java 17+, and Maven the first time), because that is
what users deploy; otherwise Tansu, the zero-Java broker, with the reason said.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from kadence.dev.brokers import apache_kafka
from kadence.dev.brokers.apache_kafka import ApacheKafka
from kadence.dev.brokers.process import BrokerUnavailable, LocalBroker, free_port
from kadence.dev.brokers.tansu import Tansu

BROKERS: dict[str, type[LocalBroker]] = {"kafka": ApacheKafka, "tansu": Tansu}
CHOICES = ("auto", *BROKERS)

__all__ = ["BROKERS", "CHOICES", "ApacheKafka", "BrokerChoice", "BrokerUnavailable", "LocalBroker", "Tansu", "choose_broker", "free_port"]


@dataclass(frozen=True)
class BrokerChoice:
    broker: type[LocalBroker]
    reason: str


def choose_broker(requested: str | None = None, nodes: int = 1) -> BrokerChoice:
    """`requested` is auto, kafka or tansu (default: $KADENCE_LOCAL_BROKER, else auto); `nodes` is
    the cluster's size, and only Apache Kafka runs more than one."""
    requested = requested or os.environ.get("KADENCE_LOCAL_BROKER") or "auto"
    if requested not in CHOICES:
        raise BrokerUnavailable(f"unknown local broker {requested!r}; choose one of {', '.join(CHOICES)}")
    if requested == "tansu":
        if nodes > 1:
            raise BrokerUnavailable(f"{Tansu.name} runs a single broker; a cluster of {nodes} needs Apache Kafka (--broker kafka)")
        return BrokerChoice(Tansu, "asked for")
    problem = apache_kafka.missing_prerequisite()
    if requested == "kafka" or nodes > 1:
        if problem is not None:
            needed = "Apache Kafka" if nodes == 1 else f"a cluster of {nodes} brokers needs Apache Kafka, which"
            raise BrokerUnavailable(
                f"{needed} cannot run here: {problem}. Install Java {apache_kafka.MIN_JAVA}+ and Maven"
                + (", or use Tansu" if nodes == 1 else "")
            )
        return BrokerChoice(ApacheKafka, "asked for" if requested == "kafka" else f"a cluster of {nodes}")
    if problem is not None:
        return BrokerChoice(Tansu, f"{problem}; Tansu needs no Java (memory only: a restart of the stack starts empty)")
    return BrokerChoice(ApacheKafka, f"Java {apache_kafka.MIN_JAVA}+ found")
