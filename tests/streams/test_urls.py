"""Stream URLs: the source policy, the FFmpeg whitelists, redaction of credentials."""

from __future__ import annotations

import os

import pytest

from streams.source import SourceError, open_source
from streams.urls import SourcePolicy, check_url, ffmpeg_options, redact_url, scrub


@pytest.fixture
def media(tmp_path):
    folder = tmp_path / "media"
    folder.mkdir()
    (folder / "clip.mp4").write_bytes(b"\0")
    (tmp_path / "secret.txt").write_text("hunter2")
    return folder


def test_files_only_from_the_media_folders_and_without_saying_what_exists(media, tmp_path):
    policy = SourcePolicy(media_dirs=(media,))
    assert check_url(str(media / "clip.mp4"), policy) == str((media / "clip.mp4").resolve())
    assert check_url("clip.mp4", policy, cwd=tmp_path) == str((media / "clip.mp4").resolve())  # relative to a folder
    assert check_url(f"file://{media}/clip.mp4", policy) == str((media / "clip.mp4").resolve())
    outside, missing = str(tmp_path / "secret.txt"), str(tmp_path / "nope.txt")
    errors = []
    for url in (outside, missing, "/etc/passwd", f"{media}/../secret.txt", f"file://{outside}"):
        with pytest.raises(ValueError, match="under the media folders") as info:
            check_url(url, policy, cwd=tmp_path)
        errors.append(str(info.value).replace(url, "URL"))
    assert errors[0] == errors[1], "an existing file outside and a missing one read the same"
    assert str(tmp_path) not in errors[0].replace("URL", "")  # no absolute folder of the machine


def test_a_symlink_out_of_the_media_folder_is_refused(media, tmp_path):
    os.symlink(tmp_path / "secret.txt", media / "link.mp4")
    with pytest.raises(ValueError, match="under the media folders"):
        check_url(str(media / "link.mp4"), SourcePolicy(media_dirs=(media,)))


def test_no_media_folders_means_no_file_streams(media):
    with pytest.raises(ValueError, match="file streams are off"):
        check_url(str(media / "clip.mp4"), SourcePolicy())


@pytest.mark.parametrize("url,rule", [
    ("tcp://0.0.0.0:9000?listen=1", "listen"),
    ("tcp://127.0.0.1:9000?listen", "listen"),
    ("udp://0.0.0.0:9000", "not allowed"),  # udp is off by default: it always binds a port
    ("gopher://x/y", "unknown scheme"),
    ("concat:/etc/passwd|/etc/shadow", "under the media folders"),  # a path, never an FFmpeg protocol
    ("http:///nohost", "names no host"),
    ("rtsp://cam\n.local/x", "printable"),
])
def test_refused_urls_name_the_rule(url, rule, media):
    with pytest.raises(ValueError, match=rule):
        check_url(url, SourcePolicy(media_dirs=(media,)))


def test_listening_needs_both_the_scheme_and_allow_listen():
    policy = SourcePolicy(schemes=("udp", "tcp"), allow_listen=True)
    assert check_url("udp://0.0.0.0:9000", policy) == "udp://0.0.0.0:9000"
    assert check_url("tcp://0.0.0.0:9000?listen=1", policy)
    with pytest.raises(ValueError, match="listen"):
        check_url("udp://0.0.0.0:9000", SourcePolicy(schemes=("udp",)))


def test_host_allowlist_by_name_wildcard_and_network():
    policy = SourcePolicy(hosts=("cam.local", "*.cams.example", "10.0.0.0/8"))
    for url in ("rtsp://cam.local/s", "rtsp://a.cams.example/s", "http://10.9.8.7:8080/x", "rtsp://u:p@CAM.local/s"):
        assert check_url(url, policy) == url
    for url in ("rtsp://evil.local/s", "http://192.168.1.1/x", "rtsp://cams.example.evil/s", "http://[::1]/x"):
        with pytest.raises(ValueError, match="not in limits.url_hosts"):
            check_url(url, policy)
    with pytest.raises(ValueError, match="url_hosts"):
        SourcePolicy(hosts=("bad host!",))
    with pytest.raises(ValueError, match="url_schemes"):
        SourcePolicy(schemes=("gopher",))


def test_ffmpeg_whitelists_per_scheme(tmp_path):
    assert ffmpeg_options("/x/clip.mp4") == {"protocol_whitelist": "file",
                                             "format_whitelist": ffmpeg_options("/y.mkv")["format_whitelist"]}
    assert "tty" not in ffmpeg_options("/x/clip.mp4")["format_whitelist"].split(",")
    assert "http" not in ffmpeg_options("/x/clip.mp4")["protocol_whitelist"].split(",")
    assert ffmpeg_options("rtsp://h/s")["protocol_whitelist"].split(",")[0] == "rtsp"
    assert "file" not in ffmpeg_options("https://h/s.m3u8")["protocol_whitelist"].split(",")


@pytest.mark.parametrize("name", ["notes.nfo", "art.ans", "readme.asc", "file_id.diz", "screen.vt"])
def test_text_files_are_not_rendered_as_video(tmp_path, name):
    """FFmpeg's tty demuxer would draw these as frames (their text readable in a snapshot)."""
    path = tmp_path / name
    path.write_text("password=hunter2\n" * 40)
    with pytest.raises(SourceError, match="not a video"):
        open_source(str(path))


@pytest.mark.parametrize("url,shown", [
    ("rtsp://admin:pa/ss@cam.local/s", "rtsp://***@cam.local/s"),
    ("rtsp://admin:pa#ss@cam.local/s", "rtsp://***@cam.local/s"),
    ("rtsp://admin:p@ss@cam.local/s", "rtsp://***@cam.local/s"),
    ("http://cam.local/s?user=admin&password=hunter2&x=1", "http://cam.local/s?user=***&password=***&x=1"),
    ("http://cam.local/s?Api_Key=k3y&auth_token=t0k#frag", "http://cam.local/s?Api_Key=***&auth_token=***#frag"),
    ("/plain/path.mp4", "/plain/path.mp4"),
])
def test_redaction_hides_userinfo_and_secret_query_values(url, shown):
    assert redact_url(url) == shown


def test_scrub_removes_secrets_a_decoder_quotes():
    url = "rtsp://admin:hunter2@cam.local/s?token=abc123"
    text = f"cannot open {url}: 401 for user admin (hunter2, abc123, hunter%32)"
    out = scrub(text, url)
    assert "hunter2" not in out and "abc123" not in out and "admin" not in out
    assert "rtsp://***@cam.local/s?token=***" in out
