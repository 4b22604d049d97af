"""Payloads through codec servers written as temporalio's samples write them (tests/codec_server.py:
protobuf's json_format over `kadence.api.common.v1.Payloads`). The encryption sample's: the UI's
client of Temporal's codec protocol (`RemotePayloadCodec`) seals and opens payloads through it, and
what goes over the wire is Temporal's JSON (base64 metadata and data). The external_storage
sample's: what a worker stored in S3 (the `s3` fixture's real server) decoded and downloaded."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from typing import Any

import aioboto3
import aiohttp
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf import json_format

from kadence.api.common.v1 import Payload, Payloads
from kadence.contrib.aws.s3driver import S3StorageDriver
from kadence.contrib.aws.s3driver.aioboto3 import new_aioboto3_client
from kadence.converter import DataConverter, ExternalStorage
from kadence.dev.s3 import LocalS3
from kadence.ops.ui.codec_server import RemotePayloadCodec
from tests.codec_server import build_codec_server, build_storage_codec_server, serving
from tests.conftest import S3_BUCKET
from tests.test_payload_codecs import AesGcmCodec
from tests.test_s3_storage import GZIPPED, REFERENCE, GzipCodec


async def test_a_codec_server_on_protobuf_payloads_seals_and_opens_what_the_ui_sends() -> None:
    codec = AesGcmCodec(AESGCM.generate_key(bit_length=256))
    plain = DataConverter().payload_converter.to_payloads(["a secret note", {"amount": 42}, None])
    async with serving(build_codec_server(codec)) as url:
        remote = RemotePayloadCodec(url)
        sealed = await remote.encode(plain)
        assert [p.metadata for p in sealed] == [{"encoding": b"binary/encrypted"}] * 3
        assert b"a secret note" not in b"".join(p.data for p in sealed)
        assert await remote.decode(sealed) == plain
        assert await codec.decode(sealed) == plain  # sealed by the server's codec, as a worker's would be

        async with aiohttp.ClientSession() as session:  # Temporal's JSON: base64, camelCase-free field names
            body = {"payloads": [{"metadata": {"encoding": base64.b64encode(b"json/plain").decode()},
                                  "data": base64.b64encode(b'"hi"').decode()}]}
            async with session.post(f"{url}/encode", json=body) as response:
                answer = await response.json()
        assert list(answer) == ["payloads"] and base64.b64decode(answer["payloads"][0]["metadata"]["encoding"]) == b"binary/encrypted"


async def test_a_codec_server_with_external_storage_serves_what_a_worker_stored_in_s3(s3: LocalS3) -> None:
    """temporalio's external_storage sample's codec server (tests/codec_server.py's
    build_storage_codec_server), imports swapped: over a worker's data converter (gzip, then S3
    past the threshold) it decodes what the worker sent, references fetched from S3 or left be,
    downloads a reference alone, and encodes so the worker reads it back."""
    notes = os.urandom(6000).hex()  # random: gzipped, still past the threshold
    values = ["a small note", {"notes": notes}]
    plain = DataConverter.default.payload_converter.to_payloads(values)
    session = aioboto3.Session()
    async with session.client("s3", endpoint_url=s3.endpoint_url, aws_access_key_id=s3.access_key,
                              aws_secret_access_key=s3.secret_key, region_name=s3.region) as s3_client:
        storage = ExternalStorage(drivers=[S3StorageDriver(client=new_aioboto3_client(s3_client), bucket=S3_BUCKET)],
                                  payload_size_threshold=4096)
        worker = dataclasses.replace(DataConverter.default, payload_codec=GzipCodec(), external_storage=storage)
        sent = await worker.encode(values)
        assert [p.metadata for p in sent] == [GZIPPED, REFERENCE]
        # As temporalio's JSON protobuf converter writes the reference: compact, keys sorted.
        assert sent[1].data == json.dumps(json.loads(sent[1].data), separators=(",", ":"), sort_keys=True).encode()
        async with serving(build_storage_codec_server(storage, GzipCodec())) as url, aiohttp.ClientSession(url) as http:
            async def post(path: str, payloads: list[Payload]) -> dict[str, Any]:
                body = json_format.MessageToDict(Payloads(payloads=payloads))
                async with http.post(path, json=body, headers={"X-Namespace": "default"}) as response:
                    assert response.status == 200, await response.text()
                    return await response.json()

            def payloads_of(answer: dict[str, Any]) -> list[Payload]:
                return [Payload.of(p) for p in json_format.ParseDict(answer, Payloads()).payloads]

            assert payloads_of(await post("/decode", sent)) == plain
            assert payloads_of(await post("/decode?preserveStorageRefs=true", sent)) == [plain[0], sent[1]]
            assert payloads_of(await post("/download", sent[1:])) == plain[1:]
            async with http.post("/download", json=json_format.MessageToDict(Payloads(payloads=sent))) as response:
                assert response.status == 400

            encoded = await post("/encode", plain)
            # The reference is the one the worker wrote (the same bytes, stored under the same
            # key), noting the size of what it stands for as temporalio's does.
            assert payloads_of(encoded) == sent
            gzipped = (await GzipCodec().encode(plain[1:]))[0]
            assert [p.get("externalPayloads") for p in encoded["payloads"]] == [None, [{"sizeBytes": str(gzipped.ByteSize())}]]
        assert await worker.decode(payloads_of(encoded)) == values
