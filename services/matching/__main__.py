"""`python -m services.matching`: run one matching service instance (a faust worker on uvloop)."""

import asyncio

import faust
import uvloop

from kadence.protocol import tracing
from kadence.protocol.kafka import core_topics, ensure_topics
from kadence.protocol.logs import configure_logging
from kadence.protocol.runner import refusing_bad_settings
from kadence.protocol.settings import KafkaSettings
from services.matching.app import create_app

if __name__ == "__main__":
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    with refusing_bad_settings("matching"):
        configure_logging("matching")
        tracing.configure("matching")
        settings = KafkaSettings.from_env()
        ensure_topics(settings, core_topics(settings))
        app = create_app(settings)
    faust.Worker(app, loglevel="WARN", quiet=True, redirect_stdouts=False, override_logging=False).execute_from_commandline()
