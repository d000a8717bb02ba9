"""Webhooks: every stored event, POSTed as JSON, in order, none lost.

The events table is the outbox (vigil/services/outbox.py): a receiver that is down, or
a Vigil that restarts, loses nothing, and events go one at a time in id order. A failed POST (no answer, a
5xx, 408 or 429) is tried again with exponential backoff (0.5 s doubling, up to the
webhook's `max_backoff_s`), never skipped; an answer the receiver means for good (any
other 4xx) is counted as rejected and passed. A receiver sees an event again only when
its answer was lost: the `Idempotency-Key` header (the event's id) lets it drop the
copy. With a secret, `X-Vigil-Signature: sha256=HEX` is the HMAC-SHA256 of the body.
"""

from __future__ import annotations

import hashlib
import hmac
import json

import httpx
from prometheus_client import Counter

from runtime.snapshots import with_links
from streams.urls import redact_url
from vigil.services.outbox import OutboxSink
from vigil.settings import Webhook
from vigil.storage import Storage


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookSink(OutboxSink):
    kind = "webhook"

    def __init__(self, hook: Webhook, storage: Storage, counter: Counter) -> None:
        # credentials never in status, metrics or logs
        super().__init__(f"webhook:{hook.url}", redact_url(hook.url), hook.events, hook.max_backoff_s, storage,
                         counter)
        self.hook = hook
        self._client: httpx.Client | None = None

    def _open(self) -> None:
        self._client = httpx.Client(timeout=self.hook.timeout_s)

    def _close(self) -> None:
        if self._client is not None:
            self._client.close()

    def _send(self, event: dict) -> tuple[str, str | None]:
        body = json.dumps(with_links(event), separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "Idempotency-Key": str(event["id"]),
                   "X-Vigil-Event-Id": str(event["id"])}
        if self.hook.secret:
            headers["X-Vigil-Signature"] = signature(self.hook.secret, body)
        try:
            r = self._client.post(self.hook.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return "failed", f"{type(exc).__name__}: {exc}"[:300]
        if r.is_success:
            return "delivered", None
        if r.status_code in (408, 429) or r.status_code >= 500:
            return "failed", f"HTTP {r.status_code}"
        return "rejected", f"HTTP {r.status_code}"


