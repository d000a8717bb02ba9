"""The log's repeat filter, on a fake clock."""

from __future__ import annotations

import logging

from vigil.http_guard import RepeatFilter


def record(msg: str, name: str = "asyncio") -> logging.LogRecord:
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, None, None)


def test_a_flood_of_one_message_is_five_lines_a_minute_then_a_count():
    now = [0.0]
    f = RepeatFilter(burst=5, window_s=60.0, clock=lambda: now[0])
    passed = []
    for i in range(1000):  # the same message with other numbers in it is the same message
        now[0] = i * 0.01
        r = record(f"Exception in callback _start_serving() when={4041.0 + i} at 0x7fd0{i:04x}")
        if f.filter(r):
            passed.append(r.getMessage())
    assert len(passed) == 5
    now[0] = 61.0
    r = record("Exception in callback _start_serving() when=9999.0 at 0x7fd0ffff")
    assert f.filter(r) and "and 995 more like it in the last 60 s" in r.getMessage()


def test_other_messages_are_not_held_back():
    f = RepeatFilter(burst=1, clock=lambda: 0.0)
    assert f.filter(record("stream a failed")) and f.filter(record("stream b failed"))
    assert f.filter(record("stream a failed", name="vigil.streams"))  # another logger
    assert not f.filter(record("stream a failed"))


def test_names_that_end_in_digits_are_other_messages():
    # six cameras cam0..cam5 going overloaded: each camera's first line gets through,
    # where counting "cam1" and "cam3" as the same message held back all but five
    f = RepeatFilter(burst=1, clock=lambda: 0.0)
    lines = [f"app cam{i} is overloaded: {30 + i}% of its frames shed, sampling 12.0 of 15.0 frames/s"
             for i in range(6)]
    assert all(f.filter(record(line, name="vigil.load")) for line in lines)
    assert not f.filter(record("app cam1 is overloaded: 41% of its frames shed, sampling 9.6 of 15.0 frames/s",
                               name="vigil.load"))  # cam1 again, other numbers: the same message
    assert f.filter(record("stream-3 failed")) and f.filter(record("stream-4 failed"))
