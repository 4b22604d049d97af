"""Activity task tokens: what names one activity attempt to whoever completes it.

A token is what `activity.info().task_token` holds and `client.get_async_activity_handle(task_token=...)`
takes: the attempt's workflow id, run id, scheduled event id, attempt and activity id, as UTF-8
JSON. It is not secret and not signed (Temporal's is not either): a token lets any client complete,
fail, heartbeat or cancel that one attempt, and the history service refuses it once the attempt
is over (a stale token).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

_VERSION = 1


@dataclass(frozen=True)
class TaskToken:
    workflow_id: str
    run_id: str
    scheduled_event_id: int
    attempt: int
    activity_id: str

    def encode(self) -> bytes:
        return json.dumps({"v": _VERSION, **asdict(self)}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, token: bytes) -> TaskToken:
        """The attempt a token names; ValueError, saying why, for bytes that are not a Kadence task token."""
        try:
            fields = json.loads(token)
            if not isinstance(fields, dict) or fields.pop("v", None) != _VERSION:
                raise ValueError("no version 1 marker")
            decoded = cls(**fields)
        except (TypeError, ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"not a Kadence activity task token ({exc}): pass activity.info().task_token unchanged") from None
        if not (isinstance(decoded.scheduled_event_id, int) and isinstance(decoded.attempt, int)):
            raise ValueError("not a Kadence activity task token (its event id and attempt are not numbers)")
        return decoded
