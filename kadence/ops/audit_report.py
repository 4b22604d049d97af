"""The audit's report for an auditor to keep: what was checked (topic, partitions, the offsets
read, the code and its modules' hashes), the counts and every finding, optionally signed.

A key file holding an Ed25519 private key (PEM) signs with Ed25519, and the matching public key
(PEM) verifies; any other key file is a shared secret for HMAC-SHA256, used both ways. The
signature covers the report's canonical JSON (sorted keys, no spaces) without the signature.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key, load_pem_public_key

FORMAT = "kadence-audit-report/1"
# Every audit that had KADENCE_POSTGRES_DSN records its report here; the web UI shows the last.
AUDIT_DDL = [
    "CREATE TABLE IF NOT EXISTS kadence_audit_reports (id bigserial PRIMARY KEY, "
    "finished_at timestamptz NOT NULL DEFAULT now(), failed boolean NOT NULL, report jsonb NOT NULL)",
]


class ReportError(ValueError):
    """A report that cannot be verified, and why."""


def build_report(summary: dict[str, Any], *, topic: str, offsets: dict[int, tuple[int, int]], modules: list[ModuleType]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "generated_at": datetime.now(UTC).isoformat(),
        "kadence_version": _kadence_version(),
        "topic": topic,
        "partitions": {str(p): {"first_offset": first, "last_offset": last} for p, (first, last) in sorted(offsets.items())},
        "worker_modules": {m.__name__: _file_hash(m) for m in modules},
        **summary,
    }


def sign(report: dict[str, Any], key: bytes) -> dict[str, Any]:
    """The report with a signature over its content (a signature it had is replaced)."""
    content = {k: v for k, v in report.items() if k != "signature"}
    private = _private_key(key)
    if private is not None:
        signature = {"algorithm": "Ed25519", "value": base64.b64encode(private.sign(canonical(content))).decode()}
    else:
        signature = {"algorithm": "HMAC-SHA256", "value": hmac.new(key, canonical(content), hashlib.sha256).hexdigest()}
    return {**content, "signature": signature}


def verify(signed: dict[str, Any], key: bytes) -> None:
    """Raises ReportError unless `signed` carries a signature `key` verifies over its content."""
    if signed.get("format") != FORMAT:
        raise ReportError(f"not a Kadence audit report ({FORMAT})")
    signature = signed.get("signature")
    if not isinstance(signature, dict):
        raise ReportError("the report is not signed")
    content = canonical({k: v for k, v in signed.items() if k != "signature"})
    if signature.get("algorithm") == "Ed25519":
        try:
            _public_key(key).verify(base64.b64decode(str(signature.get("value"))), content)
        except (InvalidSignature, ValueError) as err:
            raise ReportError("the Ed25519 signature does not match the report: it was changed, or signed with another key") from err
    elif signature.get("algorithm") == "HMAC-SHA256":
        expected = hmac.new(key, content, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, str(signature.get("value"))):
            raise ReportError("the HMAC does not match the report: it was changed, or signed with another key")
    else:
        raise ReportError(f"unknown signature algorithm {signature.get('algorithm')!r}")


def canonical(report: dict[str, Any]) -> bytes:
    return json.dumps(report, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _private_key(key: bytes) -> Ed25519PrivateKey | None:
    if b"PRIVATE KEY" not in key:
        return None
    loaded = load_pem_private_key(key, password=None)
    if not isinstance(loaded, Ed25519PrivateKey):
        raise ReportError("the signing key is a private key but not Ed25519: use Ed25519, or a shared secret for HMAC")
    return loaded


def _public_key(key: bytes) -> Ed25519PublicKey:
    if b"PUBLIC KEY" not in key:
        raise ReportError("an Ed25519-signed report is verified with the signer's public key (PEM)")
    loaded = load_pem_public_key(key)
    if not isinstance(loaded, Ed25519PublicKey):
        raise ReportError("the public key is not Ed25519")
    return loaded


def _file_hash(module: ModuleType) -> str:
    path = getattr(module, "__file__", None)
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else "no source file"


def _kadence_version() -> str:
    try:
        return version("kadence")
    except PackageNotFoundError:
        return "unknown"


def record_audit(dsn: str, report: dict[str, Any], failed: bool) -> None:
    """Keep the report in Postgres, where `kadence ui` shows the last one."""
    import psycopg

    from kadence.protocol.postgres import CONNECT_TIMEOUT_S

    with psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        for statement in AUDIT_DDL:
            conn.execute(statement)
        conn.execute("INSERT INTO kadence_audit_reports (failed, report) VALUES (%s, %s)", (failed, json.dumps(report)))


async def last_audit(pool: Any) -> dict[str, Any] | None:
    """The last recorded report (a psycopg_pool.AsyncConnectionPool's), or None if no audit recorded one."""
    import psycopg

    async with pool.connection() as conn:
        try:
            row = await (await conn.execute("SELECT report FROM kadence_audit_reports ORDER BY id DESC LIMIT 1")).fetchone()
        except psycopg.errors.UndefinedTable:
            return None
    return row[0] if row else None
