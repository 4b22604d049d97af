"""An S3StorageDriverClient over an aioboto3 S3 client, as temporalio.contrib.aws.s3driver.aioboto3:

    async with aioboto3.Session().client("s3") as s3:
        driver = S3StorageDriver(client=new_aioboto3_client(s3), bucket="my-payloads")

It calls only what aiobotocore's S3 client has (head_object, put_object, get_object), so an
aiobotocore client (`aiobotocore.session.get_session().create_client("s3")`) serves too. A payload
goes up in one PutObject: the driver's payloads stay far below S3's 5 GiB limit for one.
Storing needs s3:GetObject, s3:PutObject and s3:ListBucket (without ListBucket, S3 answers a
missing object's HeadObject with 403, not 404); retrieving needs s3:GetObject.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from kadence.contrib.aws.s3driver._client import S3StorageDriverClient

if TYPE_CHECKING:  # the stubs (types-aiobotocore-s3) type the client; at run time any such client will do
    from types_aiobotocore_s3.client import S3Client

# The codes S3 answers a HeadObject of a missing object with (a HEAD has no body, so the status).
_NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound"})


class _Aioboto3Client(S3StorageDriverClient):
    def __init__(self, client: S3Client) -> None:
        self._client = client

    def describe(self) -> Mapping[str, str]:
        facts = {"client_region": self._client.meta.region_name, "client_endpoint": self._client.meta.endpoint_url}
        return {name: value for name, value in facts.items() if value}

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        # The client's own ClientError: this module then imports no AWS package of its own.
        try:
            await self._client.head_object(Bucket=bucket, Key=key)
        except self._client.exceptions.ClientError as err:
            if err.response.get("Error", {}).get("Code") in _NOT_FOUND:
                return False
            raise
        return True

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        await self._client.put_object(Bucket=bucket, Key=key, Body=data)

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        response = await self._client.get_object(Bucket=bucket, Key=key)
        async with response["Body"] as body:  # gives the connection back to the pool when read
            return await body.read()


def new_aioboto3_client(client: S3Client) -> S3StorageDriverClient:
    """The driver's client over an aioboto3 (or aiobotocore) S3 client, which stays the caller's to close."""
    return _Aioboto3Client(client)
