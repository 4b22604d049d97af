"""External payload storage, as temporalio.converter's (the claim check): a payload at or above a
size threshold is stored by a driver outside the log, and the record carries a small reference
in its place, which the reading side exchanges for the payload again. Kafka's record limit
(10 MiB, docs/temporal-differences.md, "Limits") makes large payloads matter more here than in
Temporal. Applied to every payload a codec would encode, after the codec (so a stored payload
is compressed or encrypted as an inline one is), and before it on the way back.

A reference is written as temporalio writes one (a `json/protobuf` payload of
`temporal.api.sdk.v1.ExternalStorageReference`: the driver's name and its claim), so a history
holds the same bytes in both systems; temporalio's earlier `json/external-storage-reference`
form is read too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kadence.api.common.v1 import Payload

_REFERENCE_TYPE = b"temporal.api.sdk.v1.ExternalStorageReference"
_LEGACY_ENCODING = b"json/external-storage-reference"


@dataclass(frozen=True)
class StorageDriverClaim:
    """What a driver needs to find a payload it stored again (its key, its bucket ...)."""

    claim_data: Mapping[str, str]


@dataclass(frozen=True, kw_only=True)
class StorageDriverWorkflowInfo:
    """The workflow a payload is stored for: the one the command that carries it is about."""

    namespace: str
    id: str | None = None
    run_id: str | None = None
    type: str | None = None


@dataclass(frozen=True, kw_only=True)
class StorageDriverActivityInfo:
    """temporalio's target for an activity's payloads; Kadence names the activity's workflow instead."""

    namespace: str
    id: str | None = None
    run_id: str | None = None
    type: str | None = None


@dataclass(frozen=True)
class StorageDriverStoreContext:
    target: StorageDriverActivityInfo | StorageDriverWorkflowInfo | None = None


@dataclass(frozen=True)
class StorageDriverSelectContext:
    target: StorageDriverActivityInfo | StorageDriverWorkflowInfo | None = None


@dataclass(frozen=True)
class StorageDriverRetrieveContext:
    pass


class StorageDriver(ABC):
    """Stores payloads outside the log and gives them back by claim (as temporalio's)."""

    @abstractmethod
    def name(self) -> str:
        """This driver's name, unique among the drivers of an ExternalStorage: a reference names it."""

    def type(self) -> str:
        return type(self).__name__

    @abstractmethod
    async def store(self, context: StorageDriverStoreContext, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        """Store each payload; a claim for each, in order."""

    @abstractmethod
    async def retrieve(self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]) -> list[Payload]:
        """The payload of each claim, in order."""


@dataclass(frozen=True)
class ExternalStorage:
    """Which payloads go to which driver (as temporalio's): with one driver, every payload of
    `payload_size_threshold` bytes or more; with several, `driver_selector` chooses (None keeps
    a payload inline)."""

    drivers: Sequence[StorageDriver]
    driver_selector: Callable[[StorageDriverSelectContext, Payload], StorageDriver | None] | None = None
    payload_size_threshold: int = 256 * 1024
    _by_name: dict[str, StorageDriver] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.drivers:
            raise ValueError("ExternalStorage.drivers must hold at least one driver")
        if self.payload_size_threshold < 0:
            raise ValueError(f"ExternalStorage.payload_size_threshold is {self.payload_size_threshold}: give 0 or more bytes")
        if len(self.drivers) > 1 and self.driver_selector is None:
            raise ValueError("ExternalStorage has several drivers: give a driver_selector that chooses among them")
        by_name: dict[str, StorageDriver] = {}
        for driver in self.drivers:
            if driver.name() in by_name:
                raise ValueError(f"ExternalStorage.drivers has two drivers named {driver.name()!r}: give each its own name")
            by_name[driver.name()] = driver
        object.__setattr__(self, "_by_name", by_name)

    async def store(self, payloads: Sequence[Payload], target: StorageDriverWorkflowInfo | None = None) -> list[Payload]:
        """`payloads` with those a driver takes replaced by references to where it stored them."""
        chosen: dict[StorageDriver, list[int]] = {}
        for index, payload in enumerate(payloads):
            driver = self._driver_for(StorageDriverSelectContext(target), payload)
            if driver is not None:
                chosen.setdefault(driver, []).append(index)
        if not chosen:
            return list(payloads)
        context = StorageDriverStoreContext(target)
        groups = list(chosen.items())
        claims = await asyncio.gather(*(driver.store(context, [payloads[i] for i in indices]) for driver, indices in groups))
        stored = list(payloads)
        for (driver, indices), found in zip(groups, claims, strict=True):
            _check_count(driver, "claims", len(found), len(indices))
            for index, claim in zip(indices, found, strict=True):
                stored[index] = _reference(driver.name(), claim)
        return stored

    async def retrieve(self, payloads: Sequence[Payload]) -> list[Payload]:
        """`payloads` with each reference replaced by the payload its driver stored."""
        wanted: dict[StorageDriver, list[tuple[int, StorageDriverClaim]]] = {}
        for index, payload in enumerate(payloads):
            reference = _claim_of(payload)
            if reference is not None:
                name, claim = reference
                driver = self._by_name.get(name)
                if driver is None:
                    raise ValueError(
                        f"a payload was stored by the external storage driver {name!r}, which this data converter's "
                        f"ExternalStorage does not have (it has {sorted(self._by_name)}): give it that driver"
                    )
                wanted.setdefault(driver, []).append((index, claim))
        if not wanted:
            return list(payloads)
        groups = list(wanted.items())
        context = StorageDriverRetrieveContext()
        found = await asyncio.gather(*(driver.retrieve(context, [claim for _, claim in claims]) for driver, claims in groups))
        retrieved = list(payloads)
        for (driver, claims), stored in zip(groups, found, strict=True):
            _check_count(driver, "payloads", len(stored), len(claims))
            for (index, _), payload in zip(claims, stored, strict=True):
                retrieved[index] = Payload.of(payload)
        return retrieved

    def _driver_for(self, context: StorageDriverSelectContext, payload: Payload) -> StorageDriver | None:
        if payload.ByteSize() < self.payload_size_threshold:
            return None
        if self.driver_selector is None:
            return self.drivers[0]
        driver = self.driver_selector(context, payload)
        if driver is not None and self._by_name.get(driver.name()) is not driver:
            raise ValueError(f"driver_selector chose the driver {driver.name()!r}, which is not among ExternalStorage.drivers")
        return driver


def _reference(driver_name: str, claim: StorageDriverClaim) -> Payload:
    body = {"driverName": driver_name, "claimData": dict(claim.claim_data)}
    return Payload({"encoding": b"json/protobuf", "messageType": _REFERENCE_TYPE}, json.dumps(body, separators=(",", ":")).encode())


def _claim_of(payload: Payload) -> tuple[str, StorageDriverClaim] | None:
    """The driver's name and claim a reference holds; None for any other payload."""
    encoding = payload.metadata.get("encoding", b"")
    body: Any
    if encoding == b"json/protobuf" and payload.metadata.get("messageType") == _REFERENCE_TYPE:
        body = json.loads(payload.data)
        return body["driverName"], StorageDriverClaim(dict(body.get("claimData", {})))
    if encoding == _LEGACY_ENCODING:
        body = json.loads(payload.data)
        return body["driver_name"], StorageDriverClaim(dict(body["driver_claim"]["claim_data"]))
    return None


def _check_count(driver: StorageDriver, what: str, got: int, expected: int) -> None:
    if got != expected:
        raise ValueError(f"the external storage driver {driver.name()!r} returned {got} {what} for {expected}")
