"""`python -m services.history`: run one history service instance."""

import os

from kadence.protocol.runner import run_service
from kadence.protocol.settings import KafkaSettings, env_int
from services.history.checkpoint import CheckpointStore
from services.history.service import HistoryService


def history_service() -> HistoryService:
    # Without a Postgres DSN the service still runs, recovering every partition from offset 0.
    dsn = os.environ.get("KADENCE_POSTGRES_DSN", "")
    interval_s = env_int("KADENCE_CHECKPOINT_INTERVAL_MS", 30_000) / 1000
    return HistoryService(KafkaSettings.from_env(), CheckpointStore(dsn) if dsn else None, interval_s)


if __name__ == "__main__":
    run_service("history", lambda stop: history_service().run(stop))
