"""A codec server written as temporalio's encryption sample writes one, imports swapped: the
request's JSON parsed by protobuf's json_format into a `Payloads` message, its payloads through
the codec, the answer written back by json_format. Temporal's Web UI and Kadence's
(`kadence ui --codec-endpoint`) ask such a server to decode what a codec sealed."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from functools import partial

from aiohttp import web
from google.protobuf import json_format

from kadence.api.common.v1 import Payload, Payloads
from kadence.converter import PayloadCodec


def build_codec_server(codec: PayloadCodec) -> web.Application:
    async def apply(fn: Callable[[Iterable[Payload]], Awaitable[list[Payload]]], request: web.Request) -> web.Response:
        assert request.content_type == "application/json"
        payloads = json_format.Parse(await request.read(), Payloads())
        payloads = Payloads(payloads=await fn(payloads.payloads))
        return web.Response(content_type="application/json", text=json_format.MessageToJson(payloads))

    app = web.Application()
    app.add_routes([web.post("/encode", partial(apply, codec.encode)), web.post("/decode", partial(apply, codec.decode))])
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
