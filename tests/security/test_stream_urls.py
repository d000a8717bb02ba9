"""Stream URLs read and listen only where they may, and never show their secrets."""

from __future__ import annotations

import os
import socket

import pytest

from support.processes import free_port, wait_for


def test_a_text_file_in_a_media_folder_is_not_rendered_as_video(api, media):
    """FFmpeg's tty demuxer draws text files as frames; a snapshot of one showed its secrets."""
    r = api.post("/v1/streams", json={"name": "notes", "url": str(media / "notes.nfo")})
    assert r.status_code == 201, r.text
    wait_for(lambda: api.get("/v1/streams/notes").json()["status"] == "failed", 30, "the text file fails")
    s = api.get("/v1/streams/notes").json()
    assert "not a video" in s["last_error"] and s["frames_decoded"] == 0
    assert "hunter2" not in str(s)
    assert api.delete("/v1/streams/notes").status_code == 204


def test_files_outside_the_media_folders_are_refused_alike_whether_they_exist_or_not(api, media, tmp_path):
    os.symlink("/etc/passwd", media / "passwd.mp4")
    answers = {}
    for url in ("/etc/passwd", "/etc/no-such-file", "../../../etc/passwd", str(media / "passwd.mp4"),
                "file:///etc/passwd"):
        r = api.post("/v1/streams", json={"name": "x", "url": url})
        assert r.status_code == 404 and "under the media folders" in r.json()["detail"], r.text
        answers[url] = r.json()["detail"].replace(repr(url.removeprefix("file://")), "URL")
    assert answers["/etc/passwd"] == answers["/etc/no-such-file"]
    assert str(media) not in answers["/etc/passwd"]  # the folders by the config's names only
    assert api.get("/v1/streams/x").status_code == 404


@pytest.mark.parametrize("template", ["tcp://0.0.0.0:{port}?listen=1", "tcp://127.0.0.1:{port}?listen",
                                      "udp://0.0.0.0:{port}", "udp://127.0.0.1:{port}?localport={port}"])
def test_urls_that_would_listen_are_refused_and_nothing_listens(api, template):
    port = free_port()
    r = api.post("/v1/streams", json={"name": "push", "url": template.format(port=port)})
    assert r.status_code == 403, r.text
    assert "limits.allow_listen" in r.json()["detail"] or "limits.url_schemes" in r.json()["detail"]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


@pytest.mark.parametrize("url", ["gopher://host/x", "concat:/etc/passwd|/etc/group", "pipe:0", "data:,hello"])
def test_other_protocols_are_refused(api, url):
    assert api.post("/v1/streams", json={"name": "proto", "url": url}).status_code in (404, 422)
    assert api.get("/v1/streams/proto").status_code == 404


@pytest.mark.parametrize("userinfo,query", [("admin:pa/ss", ""), ("admin:pa#ss", ""), ("admin:p@ss", ""),
                                            ("", "?user=admin&password=hunter2&token=t0k3n")])
def test_credentials_never_show(guarded, api, userinfo, query):
    secrets = [s for s in (userinfo.partition(":")[2], "hunter2", "t0k3n") if s]
    url = f"rtsp://{userinfo + '@' if userinfo else ''}127.0.0.1:{free_port()}/cam{query}"
    r = api.post("/v1/streams", json={"name": "cam", "url": url,
                                      "options": {"backoff_initial_s": 0.2, "backoff_max_s": 0.5}})
    assert r.status_code == 201, r.text
    wait_for(lambda: api.get("/v1/streams/cam").json()["reconnects"] >= 2, 30, "the dead camera retried")
    shown = api.get("/v1/streams").text + api.get("/v1/streams/cam").text + api.get("/metrics").text
    assert api.delete("/v1/streams/cam").status_code == 204
    for secret in secrets:
        assert secret not in shown and secret not in guarded.logs(), secret
    assert "***" in shown
