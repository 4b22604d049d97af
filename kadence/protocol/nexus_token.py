"""A workflow-run Nexus operation's token, in temporalio's format (base64url JSON, no padding:
{"t": 1, "ns": namespace, "wid": workflow id}), so a caller of either SDK reads it. The caller's
history reads the handler workflow's id from it to cancel the operation."""

from __future__ import annotations

import base64
import binascii
import json

WORKFLOW_TOKEN_TYPE = 1


def workflow_run_token(workflow_id: str, namespace: str = "default") -> str:
    details = json.dumps({"t": WORKFLOW_TOKEN_TYPE, "ns": namespace, "wid": workflow_id}, separators=(",", ":"))
    return base64.urlsafe_b64encode(details.encode()).decode().rstrip("=")


def token_workflow_id(token: str) -> str | None:
    """The handler workflow's id a workflow-run operation's token names; None for any other token."""
    try:
        details = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(details, dict) or details.get("t") != WORKFLOW_TOKEN_TYPE or not isinstance(details.get("wid"), str):
        return None
    return details["wid"] or None
