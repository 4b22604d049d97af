"""`python -m services.history`: run one history service instance."""

import os

from kadence.protocol.runner import run_service
from kadence.protocol.settings import KafkaSettings, env_int
from services.history.checkpoint import CheckpointStore
from services.history.service import DEFAULT_CACHE_RUNS, HistoryService


def history_service() -> HistoryService:
    # Without a Postgres DSN the service still runs, recovering every partition from offset 0.
    dsn = os.environ.get("KADENCE_POSTGRES_DSN", "")
    interval_s = env_int("KADENCE_CHECKPOINT_INTERVAL_MS", 30_000) / 1000
    cache_runs = env_int("KADENCE_HISTORY_CACHE_RUNS", DEFAULT_CACHE_RUNS)
    return HistoryService(KafkaSettings.from_env(), CheckpointStore(dsn) if dsn else None, interval_s, cache_runs)


if __name__ == "__main__":
    run_service("history", lambda stop: history_service().run(stop))
