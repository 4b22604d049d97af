"""`python -m services.history`: run one history service instance."""

from kadence.protocol.runner import run_service
from services.history.service import run_history_service

if __name__ == "__main__":
    run_service("history", run_history_service)
