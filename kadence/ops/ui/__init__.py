"""`kadence ui`: a web UI over the read model and the log, as Temporal's Web UI: find executions,
read a run's history as a table and a timeline, act on it, and look at task queues, the dead-letter
queue and the last audit. Server-rendered HTML (every value escaped) from aiohttp; no build step."""
