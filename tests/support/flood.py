"""Many clients at once, from a process of their own (so the clients' own threads do not
slow the test that watches the server): N concurrent POSTs of one JSON body, each
giving up after a timeout. Prints the outcomes as JSON: a status code, or "gone" for a
client that gave up, and the Retry-After values seen.

    python -m support.flood URL PATH KEY N TIMEOUT_S BODY_JSON
"""

from __future__ import annotations

import json
import sys
import threading

import httpx


def flood(url: str, path: str, key: str, n: int, timeout_s: float, body: dict) -> dict:
    statuses: list = []
    retry_after: set = set()

    def client() -> None:
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=timeout_s) as c:
                r = c.post(path, json=body)
                statuses.append(r.status_code)
                if r.status_code == 503:
                    retry_after.add(r.headers.get("retry-after"))
        except httpx.TimeoutException:
            statuses.append("gone")

    threads = [threading.Thread(target=client) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"statuses": statuses, "retry_after": sorted(retry_after, key=str)}


if __name__ == "__main__":
    url, path, key, n, timeout_s, body = sys.argv[1:7]
    print(json.dumps(flood(url, path, key, int(n), float(timeout_s), json.loads(body))))
