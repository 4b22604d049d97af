"""What S3StorageDriver needs of an S3 library: three calls, with no AWS package imported here."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping


class S3StorageDriverClient(ABC):
    """The S3 calls the driver makes, as temporalio's (a client written for it ports by its imports)."""

    @abstractmethod
    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        """Write `data` as the object `key` of `bucket`."""

    @abstractmethod
    async def object_exists(self, *, bucket: str, key: str) -> bool:
        """Whether `bucket` holds the object `key`: the driver writes no object twice."""

    @abstractmethod
    async def get_object(self, *, bucket: str, key: str) -> bytes:
        """The bytes of the object `key` of `bucket`."""

    def describe(self) -> Mapping[str, str]:
        """Facts about the client (its region, its endpoint) that the driver's errors add, since a
        wrong one is the usual cause of a refused call."""
        return {}
