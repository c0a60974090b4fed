"""What a receiver gets with each event, and how it checks that the daemon sent it.

The body is the event's JSON (UTF-8, keys sorted); its headers carry the event's id as
the idempotency key (the same on every attempt and redelivery: a receiver that has seen
it skips it) and an HMAC-SHA256 of the body under ``GENESIS_FP16_EVENTS_SECRET``, as
GitHub's ``X-Hub-Signature-256`` does::

    >>> body = b'{"id": "0123456789abcdef"}'
    >>> signature = sign(b"s3cret", body)
    >>> signature
    'sha256=b05550938f26ec416fa15671f0e5071986bb416e2f905cfef8066d90c0613d81'
    >>> verify(b"s3cret", body, signature), verify(b"other", body, signature)
    (True, False)
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

SIGNATURE_HEADER = "X-Genesis-Fp16-Signature-256"
EVENT_HEADER = "X-Genesis-Fp16-Event"  # the event's kind: promote, reject, rollback, ...
DELIVERY_HEADER = "X-Genesis-Fp16-Delivery"  # the event's id, as GitHub's X-GitHub-Delivery
IDEMPOTENCY_HEADER = "Idempotency-Key"  # the event's id again, under the IETF draft's name


def body_of(event: dict[str, Any]) -> bytes:
    """The bytes posted and signed: the event's JSON, keys sorted, compact."""
    return json.dumps(event, sort_keys=True, separators=(",", ":")).encode()


def sign(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(secret: bytes, body: bytes, signature: str | None) -> bool:
    """Whether ``signature`` (the header's value) is ``body``'s under ``secret``, compared
    in constant time."""
    return signature is not None and hmac.compare_digest(sign(secret, body), signature)


def headers(event_id: str, kind: str, body: bytes, secret: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "genesis-fp16-events",
        EVENT_HEADER: kind,
        DELIVERY_HEADER: event_id,
        IDEMPOTENCY_HEADER: event_id,
        SIGNATURE_HEADER: sign(secret, body),
    }
