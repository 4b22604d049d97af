"""Structured one-line logs: `ts level logger event=... key=value ...`, ending with `trace_id=...
span_id=...` when the line is logged inside a span (docs/operations.md, "Tracing")."""

from __future__ import annotations

import logging
import os
import sys

from kadence.protocol.settings import SettingError

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def configure_logging(service: str) -> None:
    """Logs at KADENCE_LOG_LEVEL; a level that is not one of LEVELS logs at INFO and raises
    SettingError (after logging is set up, so the refusal itself is a structured line)."""
    level = os.environ.get("KADENCE_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        level=level if level in LEVELS else "INFO",
        format=f"%(asctime)s level=%(levelname)s service={service} logger=%(name)s %(message)s%(trace)s",
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(TraceIds())
        handler.addFilter(RetriedByAiokafka())
    for chatty in ("aiokafka", "faust", "mode"):  # matching's faust app: each start and stop step at INFO
        logging.getLogger(chatty).setLevel(logging.WARNING)
    if level not in LEVELS:
        raise SettingError(f"KADENCE_LOG_LEVEL={level!r} is not a log level; set one of {', '.join(LEVELS)} or unset it (default INFO)")


class RetriedByAiokafka(logging.Filter):
    """aiokafka (under matching's faust app) logs ERROR for states it retries through on its own: a
    topic its metadata does not hold yet (matching's assignor topic at every start), a broker that
    refuses connections or drops one while it restarts, a group coordinator that moved, a session
    lost to a rebalance, faust's consumer thread late on a busy host. Each is a WARNING, not a page;
    /readyz says when one lasts. Other aiokafka and faust errors keep their level."""

    RETRIED = (
        "not found in cluster metadata",
        "Unable connect to node with id",
        "Failed fetch messages from",
        "Group Coordinator Request failed",
        "Heartbeat session expired",
        "will rejoin",
        "Thread keepalive is not responding",
    )

    def filter(self, record: logging.LogRecord) -> bool:
        if (record.levelno > logging.WARNING and record.name.startswith(("aiokafka", "faust"))
                and any(retried in record.getMessage() for retried in self.RETRIED)):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


class TraceIds(logging.Filter):
    """Sets `record.trace`: ` trace_id=<32 hex> span_id=<16 hex>` of the span current where the line
    was logged, else empty. Free without tracing: OpenTelemetry is looked at only once imported."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.trace = ""
        trace = sys.modules.get("opentelemetry.trace")
        if trace is not None:
            context = trace.get_current_span().get_span_context()
            if context.is_valid:
                record.trace = f" trace_id={context.trace_id:032x} span_id={context.span_id:016x}"
        return True
