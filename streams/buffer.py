"""The bounded buffer between a stream's decoder thread and its consumer.

One producer (the decoder thread) and one consumer. A file waits for room
(`put_waiting`: back-pressure, it is decoded only as fast as the pipeline consumes it);
a live source never waits (`put_dropping`: a camera does not wait for us, so the
oldest frame goes). Waiting is cut short by the stream's stop event, polled every
`poll_s`, so a stopped stream's thread never hangs on a full buffer. `END` follows a
stream's last item.
"""

from __future__ import annotations

import queue
import threading

END = object()


class FrameBuffer:
    def __init__(self, max_items: int, stop: threading.Event, poll_s: float = 0.1) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=max_items)
        self._stop = stop
        self._poll_s = poll_s

    def put_waiting(self, item: object) -> bool:
        """Puts `item`, waiting for room; False (not put) once the stream is stopped."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=self._poll_s)
                return True
            except queue.Full:
                continue
        return False

    def put_dropping(self, item: object) -> int:
        """Puts `item` now, dropping the oldest items to make room; returns how many went."""
        dropped = 0
        while True:
            try:
                self._queue.put_nowait(item)
                return dropped
            except queue.Full:
                try:
                    self._queue.get_nowait()
                    dropped += 1
                except queue.Empty:
                    pass

    def get(self, timeout_s: float | None = None) -> object:
        """The oldest item, waiting up to `timeout_s` (None: until one comes); raises
        queue.Empty when none came."""
        return self._queue.get(timeout=timeout_s)

    def get_nowait(self) -> object:
        return self._queue.get_nowait()
