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
    for chatty in ("aiokafka", "faust", "mode"):  # matching's faust app: each start and stop step at INFO
        logging.getLogger(chatty).setLevel(logging.WARNING)
    logging.getLogger("aiokafka.cluster").addFilter(TopicNotYetInMetadata())
    if level not in LEVELS:
        raise SettingError(f"KADENCE_LOG_LEVEL={level!r} is not a log level; set one of {', '.join(LEVELS)} or unset it (default INFO)")


class TopicNotYetInMetadata(logging.Filter):
    """aiokafka logs ERROR for a topic its metadata does not hold yet, which matching's faust app
    asks for as it creates its assignor's topic at every start (and asks again): an expected state,
    a WARNING, not a page. Other aiokafka errors keep their level."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING and "not found in cluster metadata" in record.getMessage():
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
