"""A payload codec that asks a codec server, as Temporal's Web UI does: the UI holds no key, and
payloads a codec encrypted show as encoded unless it is given the endpoint of a server that holds
it. The protocol is Temporal's: POST {endpoint}/decode (or /encode) with a `Payloads` message as
protobuf's JSON writes it (`{"payloads": [{"metadata": {name: base64}, "data": base64}]}`),
answered in the same shape."""

from __future__ import annotations

from collections.abc import Sequence

import aiohttp
from google.protobuf import json_format

from kadence.api.common.v1 import Payload, Payloads
from kadence.converter import PayloadCodec

TIMEOUT_S = 10.0


class CodecServerError(RuntimeError):
    """The codec server did not answer, or not with payloads."""


class RemotePayloadCodec(PayloadCodec):
    def __init__(self, endpoint: str, namespace: str = "default") -> None:
        self.endpoint = endpoint.rstrip("/")
        self.namespace = namespace

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self._call("encode", payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self._call("decode", payloads)

    async def _call(self, operation: str, payloads: Sequence[Payload]) -> list[Payload]:
        body = json_format.MessageToDict(Payloads(payloads=payloads))
        url = f"{self.endpoint}/{operation}"
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session:
                async with session.post(url, json=body, headers={"X-Namespace": self.namespace}) as response:
                    if response.status != 200:
                        raise CodecServerError(f"the codec server at {url} answered {response.status}: {(await response.text())[:200]}")
                    answer = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise CodecServerError(f"the codec server at {url} does not answer: {exc!r}") from exc
        try:
            found = json_format.ParseDict(answer, Payloads(), ignore_unknown_fields=True).payloads
        except (json_format.ParseError, AttributeError) as exc:
            raise CodecServerError(f"the codec server at {url} did not answer with payloads: {exc}") from exc
        if len(found) != len(payloads):
            raise CodecServerError(f"the codec server at {url} did not answer with {len(payloads)} payloads")
        return [Payload.of(p) for p in found]
