"""Kadence's services: history, matching, timer, visibility. Each runs as `python -m services.<name>`."""
