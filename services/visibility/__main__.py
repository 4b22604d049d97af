"""`python -m services.visibility`: run one visibility projector instance."""

from kadence.protocol.runner import run_service
from services.visibility.service import run_visibility_service

if __name__ == "__main__":
    run_service("visibility", run_visibility_service)
