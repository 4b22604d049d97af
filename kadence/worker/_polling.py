"""How a worker polls (as temporalio.worker's PollerBehavior). temporalio's workers keep a number
of long polls open against the frontend, which these options size. A Kadence worker has one Kafka
consumer per task kind, whose fetches bring what its partitions hold in batches, and it runs one
workflow activation at a time: so the options are checked, as temporalio checks them, and then
have nothing to bound (docs/temporal-differences.md, "Workers").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PollerBehaviorSimpleMaximum:
    """At most `maximum` polls at once (temporalio's default behaviour, with 5)."""

    maximum: int = 5

    def __post_init__(self) -> None:
        if self.maximum < 1:
            raise ValueError(f"PollerBehaviorSimpleMaximum(maximum={self.maximum}): maximum must be at least 1")


@dataclass(frozen=True)
class PollerBehaviorAutoscaling:
    """Polls scaled between `minimum` and `maximum`, starting at `initial`."""

    minimum: int = 1
    maximum: int = 100
    initial: int = 5

    def __post_init__(self) -> None:
        if not 1 <= self.minimum <= self.initial <= self.maximum:
            raise ValueError(
                f"PollerBehaviorAutoscaling(minimum={self.minimum}, maximum={self.maximum}, initial={self.initial}): "
                "1 <= minimum <= initial <= maximum must hold"
            )


PollerBehavior = PollerBehaviorSimpleMaximum | PollerBehaviorAutoscaling


def check_at_least_one(**limits: int | None) -> None:
    """temporalio's check of its concurrency and poll limits: each given is at least 1."""
    for name, value in limits.items():
        if value is not None and value < 1:
            raise ValueError(f"Worker({name}={value}): must be at least 1")
