"""Matching service: routes task effects from kadence.history to task queue topics (faust-streaming)."""
