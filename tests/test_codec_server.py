"""Payloads through a codec server written as temporalio's encryption sample writes one
(tests/codec_server.py: protobuf's json_format over `kadence.api.common.v1.Payloads`): the UI's
client of Temporal's codec protocol (`RemotePayloadCodec`) seals and opens payloads through it, and
what goes over the wire is Temporal's JSON (base64 metadata and data)."""

from __future__ import annotations

import base64

import aiohttp
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from kadence.converter import DataConverter
from kadence.ops.ui.codec_server import RemotePayloadCodec
from tests.codec_server import build_codec_server, serving
from tests.test_payload_codecs import AesGcmCodec


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
