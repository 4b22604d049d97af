"""External payload storage in S3 (kadence.contrib.aws.s3driver), against a real S3-compatible server
(the `s3` fixture: versitygw, kadence/dev/s3.py), in the style of temporalio's external_storage
sample: a batch of orders too large to stay inline even gzipped passes from one activity to the
next through S3, its references in the history, the workflow's own input and result inline. And the
driver on its own: keys laid out as temporalio's driver lays them out, reads checked against the
claim's digest, errors that say what to fix."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import aioboto3
import pytest
from aiobotocore.session import get_session

from kadence import activity, workflow
from kadence.api.common.v1 import Payload
from kadence.client import Client
from kadence.contrib.aws.s3driver import S3StorageDriver
from kadence.contrib.aws.s3driver.aioboto3 import new_aioboto3_client
from kadence.converter import (
    DataConverter,
    ExternalStorage,
    PayloadCodec,
    StorageDriverActivityInfo,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)
from kadence.dev.local_stack import LocalStack
from kadence.dev.s3 import LocalS3
from kadence.worker import Worker
from tests.conftest import S3_BUCKET

if TYPE_CHECKING:
    from types_aiobotocore_s3.client import S3Client

ORDERS = 300
NOTE_BYTES = 1000  # 300 orders of 2,000 hex characters of notes: about 330 KiB gzipped, past the 256 KiB threshold
REFERENCE = {"encoding": b"json/protobuf", "messageType": b"temporal.api.sdk.v1.ExternalStorageReference"}
GZIPPED = {"encoding": b"binary/gzip"}


class GzipCodec(PayloadCodec):
    """As the sample's CompressionCodec, with no timestamp in the gzip header: the same payload
    compresses to the same bytes, so the driver stores it once."""

    async def encode(self, payloads: Iterable[Payload]) -> list[Payload]:
        return [Payload(GZIPPED, gzip.compress(p.SerializeToString(), mtime=0)) for p in payloads]

    async def decode(self, payloads: Iterable[Payload]) -> list[Payload]:
        return [Payload.FromString(gzip.decompress(p.data)) if p.metadata.get("encoding") == GZIPPED["encoding"] else p
                for p in payloads]


@dataclasses.dataclass
class Order:
    order_id: str
    weight_kg: float
    handling_notes: str


@activity.defn
async def fetch_orders(batch_id: str) -> list[Order]:
    return [Order(f"{batch_id}-{n}", 1.5 + n % 7, os.urandom(NOTE_BYTES).hex()) for n in range(ORDERS)]


@activity.defn
async def weigh_orders(orders: list[Order]) -> dict[str, float]:
    return {"orders": len(orders), "total_weight_kg": round(sum(order.weight_kg for order in orders), 1)}


@workflow.defn
class ShipBatch:
    @workflow.run
    async def run(self, batch_id: str) -> dict[str, float]:
        orders = await workflow.execute_activity(fetch_orders, batch_id, start_to_close_timeout=timedelta(seconds=60))
        return await workflow.execute_activity(weigh_orders, orders, start_to_close_timeout=timedelta(seconds=60))


@pytest.fixture
async def s3_client(s3: LocalS3) -> AsyncIterator[S3Client]:
    """A plain aiobotocore client of the server: the driver takes one as it takes aioboto3's."""
    async with get_session().create_client(
        "s3", endpoint_url=s3.endpoint_url, aws_access_key_id=s3.access_key, aws_secret_access_key=s3.secret_key,
        region_name=s3.region,
    ) as client:
        yield client


async def test_a_batch_of_orders_travels_between_activities_through_s3(stack: LocalStack, s3: LocalS3, task_queue: str) -> None:
    session = aioboto3.Session()
    async with session.client("s3", endpoint_url=s3.endpoint_url, aws_access_key_id=s3.access_key,
                              aws_secret_access_key=s3.secret_key, region_name=s3.region) as s3_client:
        driver = S3StorageDriver(client=new_aioboto3_client(s3_client), bucket=S3_BUCKET)
        converter = dataclasses.replace(DataConverter.default, payload_codec=GzipCodec(),
                                        external_storage=ExternalStorage(drivers=[driver]))
        client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, data_converter=converter)
        workflow_id = f"orders/{uuid.uuid4()}"  # a "/" the key escapes
        try:
            async with Worker(client, task_queue=task_queue, workflows=[ShipBatch], activities=[fetch_orders, weigh_orders]):
                handle = await client.start_workflow(ShipBatch.run, "BATCH-9", id=workflow_id, task_queue=task_queue)
                summary = await handle.result()
            run_id = (await handle.describe()).run_id
            events: dict[str, list[dict[str, Any]]] = {}
            for event in (await handle.fetch_history()).events:
                events.setdefault(event["attributes"][0], []).append(event["attributes"][1])
        finally:
            await client.close()
        prefix = f"v0/ns/default/wt/null/wi/{workflow_id.replace('/', '%2F')}/ri/{run_id}/d/sha256/"
        stored = (await s3_client.list_objects_v2(Bucket=S3_BUCKET, Prefix=prefix)).get("Contents", [])
        assert len(stored) == 1, "the first activity's result and the second's input are the same bytes, stored once"
        body = await (await s3_client.get_object(Bucket=S3_BUCKET, Key=stored[0]["Key"]))["Body"].read()
    assert summary == {"orders": ORDERS, "total_weight_kg": sum(1.5 + n % 7 for n in range(ORDERS))}
    # Where the batch went, the history holds a reference naming the object: the first activity's
    # result and the second's input.
    fetched, weighed = events["ActivityTaskCompleted"][0]["result"], events["ActivityTaskScheduled"][1]["input"]
    assert fetched["metadata"] == REFERENCE and [p["metadata"] for p in weighed] == [REFERENCE]
    digest = hashlib.sha256(body).hexdigest()
    assert json.loads(fetched["data"]) == {"driverName": "aws.s3driver", "claimData": {
        "bucket": S3_BUCKET, "key": prefix + digest, "hash_algorithm": "sha256", "hash_value": digest}}
    # The object is the gzipped payload; the run's own input and result are small: inline, gzipped.
    assert Payload.FromString(body).metadata == GZIPPED and len(body) > 256 * 1024
    assert events["WorkflowExecutionStarted"][0]["input"][0]["metadata"] == GZIPPED
    assert events["WorkflowExecutionCompleted"][0]["result"]["metadata"] == GZIPPED


async def test_the_driver_keys_payloads_as_temporalios_and_reads_them_back(s3_client: S3Client) -> None:
    driver = S3StorageDriver(new_aioboto3_client(s3_client), bucket=S3_BUCKET)
    payloads = [Payload({"encoding": b"json/plain"}, f'"{n}"'.encode()) for n in range(2)]
    digests = [hashlib.sha256(p.SerializeToString(deterministic=True)).hexdigest() for p in payloads]
    targets = {
        "v0/ns/default/wt/Ship%20It/wi/orders%2F7%20%C3%A9/ri/r%7E1": StorageDriverWorkflowInfo(
            namespace="default", id="orders/7 é", run_id="r~1", type="Ship It"),
        "v0/ns/null/wt/null/wi/w!-_.*'()/ri/null": StorageDriverWorkflowInfo(namespace="", id="w!-_.*'()"),
        "v0/ns/default/at/weigh/ai/3/ri/r": StorageDriverActivityInfo(namespace="default", id="3", run_id="r", type="weigh"),
        "v0/ns/default": StorageDriverWorkflowInfo(namespace="default", id="x" * 1000),  # past S3's 1,024 bytes
        "v0": None,
    }
    for prefix, target in targets.items():
        claims = await driver.store(StorageDriverStoreContext(target), payloads)
        assert [claim.claim_data["key"] for claim in claims] == [f"{prefix}/d/sha256/{digest}" for digest in digests]
        assert await driver.retrieve(StorageDriverRetrieveContext(), claims) == payloads


async def test_the_driver_chooses_a_bucket_per_payload_and_says_what_to_fix(s3: LocalS3, s3_client: S3Client) -> None:
    small, large = Payload({}, b"s"), Payload({}, b"l" * 60)
    driver = S3StorageDriver(new_aioboto3_client(s3_client), max_payload_size=100,
                             bucket=lambda context, payload: S3_BUCKET if payload.ByteSize() < 50 else "no-such-bucket")
    (claim,) = await driver.store(StorageDriverStoreContext(), [small])
    assert claim.claim_data["bucket"] == S3_BUCKET
    with pytest.raises(RuntimeError, match=r"could not store s3://no-such-bucket/v0/d/sha256/\w+, client_region=us-east-1, "
                                           rf"client_endpoint={s3.endpoint_url}: .*Check that the bucket exists"):
        await driver.store(StorageDriverStoreContext(), [large])
    with pytest.raises(ValueError, match="a payload of 103 bytes is over S3StorageDriver's max_payload_size of 100"):
        await driver.store(StorageDriverStoreContext(), [Payload({}, b"l" * 101)])
    # Bytes the claim does not name are refused; a deleted object is said to be missing.
    await s3_client.put_object(Bucket=S3_BUCKET, Key=claim.claim_data["key"], Body=Payload({}, b"t").SerializeToString())
    with pytest.raises(ValueError, match="holds bytes whose SHA-256 is .*, not the .* its claim names"):
        await driver.retrieve(StorageDriverRetrieveContext(), [claim])
    await s3_client.delete_object(Bucket=S3_BUCKET, Key=claim.claim_data["key"])
    with pytest.raises(RuntimeError, match="could not read s3://.*Check that the object was not deleted"):
        await driver.retrieve(StorageDriverRetrieveContext(), [claim])
    with pytest.raises(ValueError, match="names no bucket, key and SHA-256 digest"):
        await driver.retrieve(StorageDriverRetrieveContext(), [StorageDriverClaim({"key": "k"})])
    with pytest.raises(ValueError, match="max_payload_size is 0"):
        S3StorageDriver(new_aioboto3_client(s3_client), bucket=S3_BUCKET, max_payload_size=0)
