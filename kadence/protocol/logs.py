"""Structured one-line logs: `ts level logger event=... key=value ...`."""

from __future__ import annotations

import logging
import os

from kadence.protocol.settings import SettingError

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def configure_logging(service: str) -> None:
    """Logs at KADENCE_LOG_LEVEL; a level that is not one of LEVELS logs at INFO and raises
    SettingError (after logging is set up, so the refusal itself is a structured line)."""
    level = os.environ.get("KADENCE_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        level=level if level in LEVELS else "INFO",
        format=f"%(asctime)s level=%(levelname)s service={service} logger=%(name)s %(message)s",
    )
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    if level not in LEVELS:
        raise SettingError(f"KADENCE_LOG_LEVEL={level!r} is not a log level; set one of {', '.join(LEVELS)} or unset it (default INFO)")
