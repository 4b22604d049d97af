"""Structured one-line logs: `ts level logger event=... key=value ...`."""

from __future__ import annotations

import logging
import os


def configure_logging(service: str) -> None:
    logging.basicConfig(
        level=os.environ.get("KADENCE_LOG_LEVEL", "INFO").upper(),
        format=f"%(asctime)s level=%(levelname)s service={service} logger=%(name)s %(message)s",
    )
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
