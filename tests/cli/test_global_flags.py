"""`--url` and `--api-key` are the whole command line's: before the command, after it, or
in its group, with $VIGIL_URL (read by the settings object) when none is given."""

from __future__ import annotations

import pytest

from cli.connection import connection
from cli.main import build_parser

ARGVS = [
    (["--url", "http://a:1", "streams", "list"], "http://a:1"),  # before the command
    (["streams", "list", "--url", "http://a:1"], "http://a:1"),  # after it
    (["streams", "--url", "http://a:1", "list"], "http://a:1"),  # in its group
    (["--url", "http://a:1", "apps", "metrics", "x", "--url", "http://b:2"], "http://b:2"),  # the later one wins
    (["--url", "http://a:1", "ask", "how many?"], "http://a:1"),
    (["ask", "how many?", "--url", "http://a:1"], "http://a:1"),
    (["events", "list"], "http://env:9"),  # none given: $VIGIL_URL
]


@pytest.mark.parametrize("argv, url", ARGVS, ids=[" ".join(a) for a, _ in ARGVS])
def test_the_server_flag_goes_before_or_after_the_command(argv, url, monkeypatch):
    monkeypatch.setenv("VIGIL_URL", "http://env:9")
    assert connection(build_parser().parse_args(argv)).url == url


def test_the_key_flag_goes_before_the_command_too(monkeypatch):
    monkeypatch.delenv("VIGIL_API_KEY", raising=False)
    monkeypatch.delenv("VIGIL_API_KEYS", raising=False)
    assert connection(build_parser().parse_args(["--api-key", "k", "models", "list"])).api_key == "k"
    assert connection(build_parser().parse_args(["models", "list"])).api_key is None


def test_a_url_that_is_not_one_is_refused_before_any_request(capsys):
    from cli.main import main

    assert main(["--url", "localhost:8080", "streams", "list"]) == 1
    assert "must be http(s)://HOST:PORT" in capsys.readouterr().err
