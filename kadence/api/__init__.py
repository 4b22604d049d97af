"""Kadence's counterparts of the `temporalio.api` messages that user code meets (a payload codec, an error's recorded failure)."""
