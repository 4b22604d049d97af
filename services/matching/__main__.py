"""`python -m services.matching`: run one matching service instance (a faust app on uvloop)."""

from kadence.protocol.runner import run_service
from services.matching.service import run_matching_service

if __name__ == "__main__":
    run_service("matching", run_matching_service)
