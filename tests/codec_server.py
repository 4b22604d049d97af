"""Codec servers written as temporalio's samples write them, imports swapped: the request's JSON
parsed by protobuf's json_format into a `Payloads` message, its payloads transformed, the answer
written back by json_format. Temporal's Web UI and Kadence's (`kadence ui --codec-endpoint`) ask
such a server to decode what a codec sealed.

`build_codec_server` is the encryption sample's (a codec only); `build_storage_codec_server` the
external_storage sample's (a codec and external storage, with its /download)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web
from google.protobuf import json_format

from kadence.api.common.v1 import Payloads
from kadence.api.sdk.v1 import ExternalStorageReference
from kadence.converter import ExternalStorage, PayloadCodec

REFERENCE_TYPE = ExternalStorageReference.DESCRIPTOR.full_name.encode()

# A step of a route: the request (for its query) and the payloads it carries, to the payloads to
# answer. Payloads are protobuf Payload messages or kadence.api.common.v1.Payload: `Payloads` takes both.
Step = Callable[[web.Request, list[Any]], Awaitable[Sequence[Any]]]


def payloads_route(path: str, step: Step) -> web.RouteDef:
    """POST `path`: a `Payloads` message in protobuf's JSON in, another out, as Temporal's codec
    server protocol has them."""
    async def handle(request: web.Request) -> web.Response:
        assert request.content_type == "application/json"
        payloads = list(json_format.Parse(await request.read(), Payloads()).payloads)
        answer = Payloads(payloads=await step(request, payloads))
        return web.Response(content_type="application/json", text=json_format.MessageToJson(answer))

    return web.post(path, handle)


def build_codec_server(codec: PayloadCodec) -> web.Application:
    async def encode(request: web.Request, payloads: list[Any]) -> Sequence[Any]:
        return await codec.encode(payloads)

    async def decode(request: web.Request, payloads: list[Any]) -> Sequence[Any]:
        return await codec.decode(payloads)

    app = web.Application()
    app.add_routes([payloads_route("/encode", encode), payloads_route("/decode", decode)])
    return app


def is_reference(payload: Any) -> bool:
    """Whether `payload` is external storage's reference to a payload it stored, as the sample
    tells one: by the message type in its metadata."""
    return payload.metadata.get("encoding") == b"json/protobuf" and payload.metadata.get("messageType") == REFERENCE_TYPE


def build_storage_codec_server(storage: ExternalStorage, codec: PayloadCodec) -> web.Application:
    """As temporalio's external_storage sample serves one: payloads through the codec and then
    external storage on /encode, as a worker's data converter sends them, and back on /decode;
    ?preserveStorageRefs=true leaves the references as they are. /download answers what
    references (and nothing else) stand for, so a UI fetches a large payload only when asked.
    Storage is called by the private names the sample calls temporalio's by."""
    async def decode_all_but_references(payloads: Sequence[Any]) -> list[Any]:
        # A reference was not made by the codec, so only the rest go through it.
        answer = list(payloads)
        encoded = [index for index, payload in enumerate(payloads) if not is_reference(payload)]
        for index, payload in zip(encoded, await codec.decode([payloads[i] for i in encoded]), strict=True):
            answer[index] = payload
        return answer

    async def encode(request: web.Request, payloads: list[Any]) -> Sequence[Any]:
        return await storage._store_payload_sequence(await codec.encode(payloads))

    async def decode(request: web.Request, payloads: list[Any]) -> Sequence[Any]:
        if request.query.get("preserveStorageRefs", "false").lower() != "true":
            payloads = await storage._retrieve_payload_sequence(payloads)
        return await decode_all_but_references(payloads)

    async def download(request: web.Request, payloads: list[Any]) -> Sequence[Any]:
        if not all(is_reference(payload) for payload in payloads):
            raise web.HTTPBadRequest(text="/download takes references to stored payloads only")
        return await codec.decode(await storage._retrieve_payload_sequence(payloads))

    app = web.Application()
    app.add_routes([payloads_route("/encode", encode), payloads_route("/decode", decode), payloads_route("/download", download)])
    return app


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """`app` served on a free local port, by its URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
