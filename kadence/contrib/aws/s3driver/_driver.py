"""S3StorageDriver: payloads as S3 objects named by their SHA-256, claims as temporalio's driver writes them.

An object's key is laid out as temporalio's driver lays it out, so a bucket policy or a lifecycle
rule on a prefix means the same under either SDK:

    v0/ns/{namespace}/wt/{workflow type}/wi/{workflow id}/ri/{run id}/d/sha256/{hex digest}
    v0/ns/{namespace}/at/{activity type}/ai/{activity id}/ri/{run id}/d/sha256/{hex digest}
    v0/d/sha256/{hex digest}                          (a store with no target)

A missing or empty part is `null` (Kadence's target names the workflow type for a start's
payloads only, so most of its keys hold `wt/null`); every byte of a part outside S3's safe characters is written `%XX`; a key longer than
S3's 1,024 bytes keeps only its namespace: `v0/ns/{namespace}/d/sha256/{hex digest}`.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

from kadence.api.common.v1 import Payload
from kadence.contrib.aws.s3driver._client import S3StorageDriverClient
from kadence.converter import (
    StorageDriver,
    StorageDriverActivityInfo,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

DRIVER_TYPE = "aws.s3driver"
HASH_ALGORITHM = "sha256"
MAX_KEY_BYTES = 1024  # S3's limit on a key
# S3's safe characters besides letters and digits. quote() also keeps "~", which S3 does not list:
# it is escaped apart, so a key is byte for byte the one temporalio's driver makes.
_SAFE = "!-_.*'()"

BucketChooser = Callable[[StorageDriverStoreContext, Payload], str]
_T = TypeVar("_T")


class S3StorageDriver(StorageDriver):
    """Stores each payload as an S3 object under the SHA-256 of its bytes, and checks that digest
    when it reads the object back. `bucket` is a name (or an access point ARN), or a function of
    the store's context and the payload that chooses one for each payload."""

    def __init__(
        self,
        client: S3StorageDriverClient,
        bucket: str | BucketChooser,
        driver_name: str = DRIVER_TYPE,
        max_payload_size: int = 50 * 1024 * 1024,
    ) -> None:
        if max_payload_size <= 0:
            raise ValueError(f"S3StorageDriver's max_payload_size is {max_payload_size}: give a size in bytes above 0")
        self._client = client
        self._bucket = bucket
        self._name = driver_name or DRIVER_TYPE
        self._max_payload_size = max_payload_size

    def name(self) -> str:
        return self._name

    def type(self) -> str:
        return DRIVER_TYPE

    async def store(self, context: StorageDriverStoreContext, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        scoped, unscoped = _key_prefixes(context.target)
        return await _all([self._store_one(context, payload, scoped, unscoped) for payload in payloads])

    async def retrieve(self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]) -> list[Payload]:
        return await _all([self._retrieve_one(claim) for claim in claims])

    async def _store_one(self, context: StorageDriverStoreContext, payload: Payload, scoped: str, unscoped: str) -> StorageDriverClaim:
        data = payload.SerializeToString(deterministic=True)
        if len(data) > self._max_payload_size:
            raise ValueError(
                f"a payload of {len(data)} bytes is over S3StorageDriver's max_payload_size of {self._max_payload_size}: "
                "raise max_payload_size, or pass a smaller value"
            )
        digest = hashlib.sha256(data).hexdigest()
        key = f"{scoped}/d/{HASH_ALGORITHM}/{digest}"
        if len(key) > MAX_KEY_BYTES:  # quoted, a key is ASCII: its length is its size in bytes
            key = f"{unscoped}/d/{HASH_ALGORITHM}/{digest}"
        bucket = self._bucket(context, payload) if callable(self._bucket) else self._bucket
        try:
            if not await self._client.object_exists(bucket=bucket, key=key):
                await self._client.put_object(bucket=bucket, key=key, data=data)
        except Exception as err:
            raise RuntimeError(
                f"S3StorageDriver could not store s3://{bucket}/{key}{self._described()}: {err}. Check that the bucket "
                "exists (the driver creates none) and that the client's endpoint, region and credentials may read and write it"
            ) from err
        return StorageDriverClaim({"bucket": bucket, "key": key, "hash_algorithm": HASH_ALGORITHM, "hash_value": digest})

    async def _retrieve_one(self, claim: StorageDriverClaim) -> Payload:
        bucket, key = claim.claim_data.get("bucket"), claim.claim_data.get("key")
        algorithm, expected = claim.claim_data.get("hash_algorithm"), claim.claim_data.get("hash_value")
        if not bucket or not key or algorithm != HASH_ALGORITHM or not expected:
            raise ValueError(
                f"the claim {dict(claim.claim_data)} names no bucket, key and SHA-256 digest: it was not written by an "
                f"S3StorageDriver, or the driver named {self._name!r} in the reference is another one"
            )
        try:
            data = await self._client.get_object(bucket=bucket, key=key)
        except Exception as err:
            raise RuntimeError(
                f"S3StorageDriver could not read s3://{bucket}/{key}{self._described()}: {err}. Check that the object was "
                "not deleted (a lifecycle rule shorter than the histories that name it) and that the client may read the bucket"
            ) from err
        actual = hashlib.sha256(data).hexdigest()
        if actual != expected:
            raise ValueError(
                f"s3://{bucket}/{key} holds bytes whose SHA-256 is {actual}, not the {expected} its claim names: "
                "something other than the driver wrote that object"
            )
        return Payload.FromString(data)

    def _described(self) -> str:
        """The client's facts for an error, never an error of their own: the real one matters more."""
        try:
            facts = self._client.describe()
        except Exception:
            return ""
        return "".join(f", {name}={value}" for name, value in facts.items())


def _key_prefixes(target: StorageDriverActivityInfo | StorageDriverWorkflowInfo | None) -> tuple[str, str]:
    """A key's part before the digest: with the target's workflow or activity, and with its namespace only."""
    if target is None:
        return "v0", "v0"
    namespace = f"v0/ns/{_part(target.namespace)}"
    kind, id_kind = ("wt", "wi") if isinstance(target, StorageDriverWorkflowInfo) else ("at", "ai")
    return f"{namespace}/{kind}/{_part(target.type)}/{id_kind}/{_part(target.id)}/ri/{_part(target.run_id)}", namespace


def _part(value: str | None) -> str:
    return quote(value, safe=_SAFE).replace("~", "%7E") if value else "null"


async def _all(calls: Sequence[Coroutine[Any, Any, _T]]) -> list[_T]:
    """Every call at once, the results in order. The first to fail is raised, and cancels the
    others: no upload or download goes on for a store or a retrieve that already failed."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
