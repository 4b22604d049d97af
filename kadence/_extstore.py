"""External payload storage, as temporalio.converter's (the claim check): a payload at or above a
size threshold is stored by a driver outside the log, and the record carries a small reference
in its place, which the reading side exchanges for the payload again. Kafka's record limit
(10 MiB, docs/temporal-differences.md, "Limits") makes large payloads matter more here than in
Temporal. Applied to every payload a codec would encode, after the codec (so a stored payload
is compressed or encrypted as an inline one is), and before it on the way back.

A reference is written as temporalio writes one (a `json/protobuf` payload of
`temporal.api.sdk.v1.ExternalStorageReference`, kadence.api.sdk.v1's: the driver's name and its
claim, in protobuf's JSON, compact, keys sorted), so a history holds the same bytes in both
systems; temporalio's earlier `json/external-storage-reference` form is read too. A codec server
written for temporalio stores and retrieves through `_store_payload_sequence` and
`_retrieve_payload_sequence`, on protobuf Payload messages, as it calls temporalio's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from google.protobuf import json_format

from kadence.api.common.v1 import Payload, PayloadMessage
from kadence.api.sdk.v1 import ExternalStorageReference

_PROTOBUF_JSON = b"json/protobuf"
_REFERENCE_TYPE = ExternalStorageReference.DESCRIPTOR.full_name.encode()
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
        references = await self._store(payloads, target)
        return [references.get(index, payload) for index, payload in enumerate(payloads)]

    async def retrieve(self, payloads: Sequence[Payload]) -> list[Payload]:
        """`payloads` with each reference replaced by the payload its driver stored."""
        retrieved = await self._retrieve(payloads)
        return [retrieved.get(index, payload) for index, payload in enumerate(payloads)]

    async def _store_payload_sequence(self, payloads: Sequence[Payload | PayloadMessage]) -> list[PayloadMessage]:
        """`store` as temporalio's codec server calls it, on the protobuf Payload messages a
        `Payloads` holds (Payloads are taken too), for no workflow: what stays inline is given
        back as it came (a Payload as a message), and each reference notes the size of what it
        stands for in `external_payloads`, as temporalio's does."""
        found = [Payload.of(payload) for payload in payloads]
        references = await self._store(found, None)
        messages = [_message(payload) for payload in payloads]
        for index, reference in references.items():
            messages[index] = PayloadMessage(metadata=reference.metadata, data=reference.data,
                                             external_payloads=[{"size_bytes": found[index].ByteSize()}])
        return messages

    async def _retrieve_payload_sequence(self, payloads: Sequence[Payload | PayloadMessage]) -> list[PayloadMessage]:
        """`retrieve` as temporalio's codec server calls it, on protobuf Payload messages (Payloads
        are taken too): each reference replaced by the payload stored, as a message; the rest
        given back as they came (a Payload as a message)."""
        retrieved = await self._retrieve([Payload.of(payload) for payload in payloads])
        return [_message(retrieved.get(index, payload)) for index, payload in enumerate(payloads)]

    async def _store(self, payloads: Sequence[Payload], target: StorageDriverWorkflowInfo | None) -> dict[int, Payload]:
        """The reference to each payload a driver stored, by its index in `payloads`."""
        chosen: dict[StorageDriver, list[int]] = {}
        for index, payload in enumerate(payloads):
            driver = self._driver_for(StorageDriverSelectContext(target), payload)
            if driver is not None:
                chosen.setdefault(driver, []).append(index)
        if not chosen:
            return {}
        context = StorageDriverStoreContext(target)
        groups = list(chosen.items())
        claims = await asyncio.gather(*(driver.store(context, [payloads[i] for i in indices]) for driver, indices in groups))
        references: dict[int, Payload] = {}
        for (driver, indices), found in zip(groups, claims, strict=True):
            _check_count(driver, "claims", len(found), len(indices))
            for index, claim in zip(indices, found, strict=True):
                references[index] = _reference(driver.name(), claim)
        return references

    async def _retrieve(self, payloads: Sequence[Payload]) -> dict[int, Payload]:
        """The payload each reference among `payloads` stands for, by its index."""
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
            return {}
        groups = list(wanted.items())
        context = StorageDriverRetrieveContext()
        found = await asyncio.gather(*(driver.retrieve(context, [claim for _, claim in claims]) for driver, claims in groups))
        retrieved: dict[int, Payload] = {}
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
    """The message in a payload as temporalio's JSON protobuf converter writes one: protobuf's
    JSON, compact and with its keys sorted (json_format has no compact form of its own)."""
    body = json_format.MessageToDict(ExternalStorageReference(driver_name=driver_name, claim_data=claim.claim_data))
    data = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    return Payload({"encoding": _PROTOBUF_JSON, "messageType": _REFERENCE_TYPE}, data)


def _message(payload: Payload | PayloadMessage) -> PayloadMessage:
    if isinstance(payload, PayloadMessage):
        return payload
    return PayloadMessage(metadata=payload.metadata, data=payload.data)


def _claim_of(payload: Payload) -> tuple[str, StorageDriverClaim] | None:
    """The driver's name and claim a reference holds; None for any other payload."""
    encoding = payload.metadata.get("encoding", b"")
    if encoding == _PROTOBUF_JSON and payload.metadata.get("messageType") == _REFERENCE_TYPE:
        reference = json_format.Parse(payload.data, ExternalStorageReference())
        return reference.driver_name, StorageDriverClaim(dict(reference.claim_data))
    if encoding == _LEGACY_ENCODING:
        body = json.loads(payload.data)
        return body["driver_name"], StorageDriverClaim(dict(body["driver_claim"]["claim_data"]))
    return None


def _check_count(driver: StorageDriver, what: str, got: int, expected: int) -> None:
    if got != expected:
        raise ValueError(f"the external storage driver {driver.name()!r} returned {got} {what} for {expected}")
