"""A real S3-compatible server on this machine, for the tests of kadence.contrib.aws.s3driver and
for samples run by hand: the Versity S3 Gateway (versitygw, Apache-2.0) over a directory, each
subdirectory of which is a bucket.

Go builds it from source once (`go install`, its modules from the Go module proxy: 140 CPU-seconds,
two and a half to three and a half minutes on two cores) into ~/.cache/kadence, as Apache Kafka's jars are fetched once; later
starts need neither Go nor the network. As a command, it serves until Ctrl-C:

    python -m kadence.dev.s3 --port 5000 --access-key test --secret-key test --bucket temporal-payloads
    python -m kadence.dev.s3 --build       # only build it (what a test skipped for want of it says to run)
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kadence.dev import cache_root
from kadence.dev.brokers.process import NodeProcess

log = logging.getLogger("kadence.dev")

VERSITYGW = "github.com/versity/versitygw/cmd/versitygw"
VERSITYGW_VERSION = "v1.8.0"
BUILD_COMMAND = "python -m kadence.dev.s3 --build"


class S3Unavailable(RuntimeError):
    """The S3 server cannot be built or did not come up; the message says why and what to do."""


def cache_dir() -> Path:
    return cache_root() / f"versitygw-{VERSITYGW_VERSION}"


def binary_path() -> Path:
    return cache_dir() / "versitygw"


def missing_prerequisite() -> str | None:
    """Why the server cannot be had here, or None when it is built or Go can build it."""
    if binary_path().exists() or shutil.which("go") is not None:
        return None
    return (f"versitygw {VERSITYGW_VERSION} is not built in {cache_dir()} and no Go toolchain (go on PATH) can build it: "
            f"install Go 1.25 or later, then run `{BUILD_COMMAND}`")


def build() -> Path:
    """The server's binary, built on first use and cached. A lock on the cache makes processes
    that ask at once (pytest-xdist's workers) build it once: the others wait, then find it."""
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary_path().exists():
            _go_install(directory)
    return binary_path()


def _go_install(directory: Path) -> None:
    problem = missing_prerequisite()
    if problem is not None:
        raise S3Unavailable(problem)
    staging = directory / "staging"  # go install writes here, then one rename: no half-written binary is ever found
    env = {**os.environ, "GOBIN": str(staging), "GOFLAGS": f"{os.environ.get('GOFLAGS', '')} -mod=mod".strip()}
    log.info("event=s3_server_building module=%s@%s cache=%s (first use only: a few minutes)", VERSITYGW, VERSITYGW_VERSION, directory)
    started = time.monotonic()
    # Niced: a build begun in the background runs beside the tests.
    result = subprocess.run(["go", "install", f"{VERSITYGW}@{VERSITYGW_VERSION}"], env=env, capture_output=True, text=True,
                            timeout=1200, preexec_fn=lambda: os.nice(10))
    if result.returncode != 0:
        raise S3Unavailable(
            f"building versitygw {VERSITYGW_VERSION} failed (go install exited {result.returncode}): "
            f"{(result.stdout + result.stderr).strip()[-2000:]}\n"
            f"Check that the Go module proxy is reachable (`go env GOPROXY`), then run `{BUILD_COMMAND}`"
        )
    (staging / "versitygw").replace(binary_path())
    log.info("event=s3_server_built binary=%s seconds=%.0f", binary_path(), time.monotonic() - started)


@dataclass
class LocalS3:
    """versitygw on 127.0.0.1:`port`, its buckets under `data_dir`/buckets, its log in `data_dir`/versitygw.log.
    `access_key` and `secret_key` are the one account it knows, which owns every bucket."""

    data_dir: Path
    port: int
    buckets: Sequence[str] = ()
    access_key: str = "kadence"
    secret_key: str = "kadence-secret"
    region: str = "us-east-1"
    _process: NodeProcess = field(init=False)

    def __post_init__(self) -> None:
        self._process = NodeProcess(1, self.port, self.data_dir / "versitygw.log")

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def bucket_dir(self) -> Path:
        return self.data_dir / "buckets"

    def start(self, timeout: float = 30.0) -> None:
        """Build it if need be, make the buckets (a directory each) and wait until it listens."""
        binary = build()
        self.bucket_dir.mkdir(parents=True, exist_ok=True)
        for bucket in self.buckets:
            (self.bucket_dir / bucket).mkdir(exist_ok=True)
        self._process.spawn([str(binary), "--port", f"127.0.0.1:{self.port}", "--access", self.access_key,
                             "--secret", self.secret_key, "--region", self.region, "--quiet", "posix", str(self.bucket_dir)])
        deadline = time.monotonic() + timeout
        while not self._process.listening():
            if self._process.exit_code() is not None or time.monotonic() > deadline:
                self.stop()
                raise S3Unavailable(f"versitygw did not come up on {self.endpoint_url}; see {self._process.log_path}")
            time.sleep(0.05)
        log.info("event=s3_server_started endpoint=%s buckets=%s", self.endpoint_url, self.bucket_dir)

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait_stopped(timeout=10)


@contextmanager
def local_s3(data_dir: Path, port: int, buckets: Sequence[str] = (), **credentials: str) -> Iterator[LocalS3]:
    server = LocalS3(data_dir, port, buckets, **credentials)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kadence.dev.s3", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", action="store_true", help="Build the server into the cache and exit.")
    parser.add_argument("--port", type=int, default=5000, help="Port on 127.0.0.1 (default: 5000, the samples').")
    parser.add_argument("--data-dir", type=Path, default=Path(".kadence/s3"), help="Where the buckets live (default: .kadence/s3).")
    parser.add_argument("--bucket", action="append", default=[], help="A bucket to make if missing (repeatable).")
    parser.add_argument("--access-key", default=LocalS3.access_key, help="The account's access key id.")
    parser.add_argument("--secret-key", default=LocalS3.secret_key, help="The account's secret access key.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.build:
            print(build())
            return
        with local_s3(args.data_dir.resolve(), args.port, args.bucket, access_key=args.access_key, secret_key=args.secret_key) as s3:
            print(f"S3 at {s3.endpoint_url} (access key {s3.access_key!r}, region {s3.region}), buckets in {s3.bucket_dir}; "
                  "Ctrl-C stops it", flush=True)
            # Blocked only now, after the server started: it must not inherit the mask.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except S3Unavailable as err:
        raise SystemExit(str(err)) from None


if __name__ == "__main__":
    main()
