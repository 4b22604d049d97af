"""`python -m services.history`: run one history service instance."""

from kadence.protocol.runner import run_service
from kadence.protocol.settings import KafkaSettings
from services.history.service import HistoryService

if __name__ == "__main__":
    run_service("history", lambda stop: HistoryService(KafkaSettings.from_env()).run(stop))
