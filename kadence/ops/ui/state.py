"""The web UI's state, which the server's pages and the operators' pages (kadence/ops/ui/operations.py)
share: its settings, the `Ui` every handler reaches through UI_KEY (the client, a read-model pool,
who may act), the request's form token, reading the log without holding a page forever, and the
HTML response."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from kadence.client import Client
from kadence.converter import DataConverter
from kadence.ops.ui import pages
from kadence.ops.ui.codec_server import RemotePayloadCodec
from kadence.ops.ui.execution import PayloadReader
from kadence.ops.ui.html import Html
from kadence.protocol.postgres import connection_pool
from kadence.protocol.settings import KafkaSettings

AUTH_COOKIE = "kadence_ui_auth"
DEFAULT_PORT = 8233  # Temporal's Web UI in `temporal server start-dev`
STATEMENT_TIMEOUT_S = 15.0  # a page's query that runs longer is cancelled: the page says so
SIGN_IN_CODE_TTL_S = 60.0  # the link `kadence ui` prints signs in once, within this
ACTION_TIMEOUT_S = 30.0  # an action whose answer does not come within this says so
_SESSION_MESSAGE = b"kadence-ui-session"
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

CSRF_KEY = web.RequestKey("csrf", str)  # the form token of this request's browser


@dataclass(frozen=True)
class UiSettings:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token: str | None = None  # actions need it (unless behind the auth proxy)
    auth_proxy_header: str | None = None  # set: the proxy in front authenticates, naming the user in this header
    read_only: bool = False
    codec_endpoint: str | None = None  # a Temporal codec server: payloads are decoded (and signal inputs encoded) there
    page_size: int = 50  # executions a list page
    events_page: int = 1000  # events in an execution's table per page (the JSON export has them all)
    kafka_timeout_s: float = 20.0  # a page's read of the log (or a replay) that takes longer fails, saying so
    allowed_hosts: tuple[str, ...] = ()  # the Host names it answers; none: loopback's when bound to loopback, else any

    def served_hosts(self) -> frozenset[str] | None:
        """The host names requests may name (a DNS-rebinding page names its own), None for any."""
        if self.allowed_hosts:
            return frozenset(h.lower() for h in self.allowed_hosts)
        return _LOOPBACK if self.host in _LOOPBACK else None

    @classmethod
    def from_env(cls) -> UiSettings:
        """KADENCE_UI_HOST, _PORT, _TOKEN, _AUTH_PROXY_HEADER, _READ_ONLY (true/1), _CODEC_ENDPOINT,
        _ALLOWED_HOSTS (comma-separated host names)."""
        env = os.environ
        return cls(
            host=env.get("KADENCE_UI_HOST") or "127.0.0.1", port=int(env.get("KADENCE_UI_PORT") or DEFAULT_PORT),
            token=env.get("KADENCE_UI_TOKEN") or None, auth_proxy_header=env.get("KADENCE_UI_AUTH_PROXY_HEADER") or None,
            read_only=(env.get("KADENCE_UI_READ_ONLY") or "").lower() in ("1", "true", "yes"),
            codec_endpoint=env.get("KADENCE_UI_CODEC_ENDPOINT") or None,
            allowed_hosts=tuple(h.strip() for h in (env.get("KADENCE_UI_ALLOWED_HOSTS") or "").split(",") if h.strip()),
        )


def same_secret(sent: str, expected: str) -> bool:
    """A constant-time comparison of what a request sent, whatever its characters (compare_digest
    refuses a non-ASCII str, which would make every page with such a cookie a 500)."""
    return hmac.compare_digest(sent.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


class Ui:
    """The server's state: the client (actions), a read-model pool, the payload reader."""

    def __init__(self, settings: UiSettings, kafka: KafkaSettings, dsn: str) -> None:
        self.settings = settings
        self.kafka = kafka
        codec = RemotePayloadCodec(settings.codec_endpoint) if settings.codec_endpoint else None
        self.converter = DataConverter(payload_codec=codec)
        self.reader = PayloadReader(self.converter)
        self.dsn = dsn
        self.pool = connection_pool(dsn, min_size=1, max_size=4, timeout_s=10.0, statement_timeout_s=STATEMENT_TIMEOUT_S)
        self.client: Client | None = None
        self._sign_in_codes: dict[str, float] = {}  # code: when it expires (time.monotonic)

    async def start(self) -> None:
        await self.pool.open()
        self.client = await Client.connect(self.kafka.bootstrap_servers, postgres_dsn=self.dsn, data_converter=self.converter,
                                           identity=f"kadence-ui@{os.uname().nodename}")

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
        await self.pool.close()

    # ---- who may act ----------------------------------------------------------------------------

    def session_value(self) -> str:
        assert self.settings.token is not None
        return hmac.new(self.settings.token.encode(), _SESSION_MESSAGE, hashlib.sha256).hexdigest()

    def issue_sign_in_code(self) -> str:
        """A code that signs in once, within SIGN_IN_CODE_TTL_S: the link `kadence ui` prints carries
        it rather than the token, which would stay in the browser's history and proxies' logs."""
        code = secrets.token_urlsafe(24)
        self._sign_in_codes[code] = time.monotonic() + SIGN_IN_CODE_TTL_S
        return code

    def redeem_sign_in_code(self, code: str) -> bool:
        now = time.monotonic()
        self._sign_in_codes = {c: expires for c, expires in self._sign_in_codes.items() if expires > now}
        return self._sign_in_codes.pop(code, None) is not None

    def actor(self, request: web.Request) -> str | None:
        """Who is acting, or None if this request may not act."""
        if self.settings.read_only:
            return None
        if self.settings.auth_proxy_header:
            return request.headers.get(self.settings.auth_proxy_header) or None
        if self.settings.token is None:
            return None
        bearer = request.headers.get("Authorization", "")
        if bearer.startswith("Bearer ") and same_secret(bearer[7:], self.settings.token):
            return "token"
        cookie = request.cookies.get(AUTH_COOKIE, "")
        return "token" if cookie and same_secret(cookie, self.session_value()) else None

    def viewer(self, request: web.Request) -> pages.Viewer:
        can_act = self.actor(request) is not None
        if self.settings.read_only:
            why = "read-only: this UI was started with --read-only"
        elif self.settings.auth_proxy_header:
            why = f"actions need the auth proxy's {self.settings.auth_proxy_header} header, which this request lacks"
        elif self.settings.token is None:
            why = "read-only: no token configured"
        else:
            why = "sign in with the UI's token to act"
        return pages.Viewer(csrf=request[CSRF_KEY], can_act=can_act, why_not=why,
                            can_sign_in=self.settings.token is not None and not self.settings.read_only
                            and not self.settings.auth_proxy_header)


class KafkaTimeout(Exception):
    """A read of the log (or a replay) took longer than the UI's kafka_timeout_s."""


async def from_kafka(ui: Ui, function: Any, *args: Any) -> Any:
    """`function(*args)`, a blocking Kafka call, in a thread, given up after kafka_timeout_s: a broker
    that stops answering mid-read would otherwise hold the page forever (the thread ends on its own)."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(function, *args), ui.settings.kafka_timeout_s)
    except TimeoutError:
        raise KafkaTimeout(f"the Kafka broker did not answer within {ui.settings.kafka_timeout_s:g} s") from None


UI_KEY = web.AppKey("ui", Ui)


def html_response(body: Html, status: int = 200) -> web.Response:
    return web.Response(text=body, content_type="text/html", charset="utf-8", status=status)
