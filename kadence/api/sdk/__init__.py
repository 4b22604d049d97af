"""Kadence's counterparts of the `temporalio.api.sdk` messages that user code meets."""
