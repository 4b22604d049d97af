"""The dev stack: `kadence dev`, the tests and the benchmarks run every service against a local
broker (Apache Kafka in KRaft mode, or Tansu) and an embedded PostgreSQL. Not part of the SDK:
`import kadence` never imports it."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Where what the dev stack fetches or builds once is kept (Apache Kafka's classpath, the S3
    server): ~/.cache/kadence, outside any work tree, so every checkout shares it."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kadence"
