"""`python -m services.timer`: run one timer service instance."""

from kadence.protocol.runner import run_service
from services.timer.service import run_timer_service

if __name__ == "__main__":
    run_service("timer", run_timer_service)
