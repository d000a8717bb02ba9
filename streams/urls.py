"""Stream URLs: what a stream may open (`SourcePolicy`, `check_url`), the FFmpeg
whitelists each scheme opens with, and redaction of credentials for everything that
shows a URL to a person.

A URL given to the server is a request to read, and sometimes to listen: a file path
reads the server's disk, `tcp://0.0.0.0:N?listen=1` or `udp://` opens a port, an
`http://` URL reaches any host the server can. The policy says which of those are
allowed: files only under the media folders, only the configured schemes, only the
configured hosts, listening only when asked for. FFmpeg is then held to the same: each
scheme opens with a protocol whitelist (a file cannot pull in `http:` or `concat:`)
and a demuxer whitelist (a text file is not rendered as video by the `tty` demuxer).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

# Query keys whose values are secrets (matched case-insensitively, as a whole key or a
# key that ends in one of these: `x_api_key`, `auth_token`).
SECRET_KEYS = ("user", "username", "pass", "password", "passwd", "pwd", "token", "key", "apikey", "api_key",
               "secret", "auth", "authorization", "signature", "sig", "credential", "credentials")
DEVICE_PATTERN = re.compile(r"/dev/video\d{1,3}")
LISTEN_SCHEMES = ("udp",)  # these bind a local port whatever the URL says
ALL_SCHEMES = ("file", "synthetic", "rtsp", "rtsps", "rtmp", "rtmps", "http", "https", "tcp", "udp", "v4l2")
DEFAULT_SCHEMES = ("file", "synthetic", "rtsp", "rtsps", "rtmp", "rtmps", "http", "https", "tcp", "v4l2")

# Demuxers a video file (or an HTTP/TCP stream) may be read with. Not on the list, on
# purpose: tty (renders text files), image2 (globs of files), concat, hls for local files
# (playlists that name other files), lavfi, ffmetadata, subtitles.
VIDEO_FORMATS = ("mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi,flv,mpegts,mpeg,mpegvideo,h264,hevc,mjpeg,mpjpeg,"
                 "m4v,ivf,yuv4mpegpipe,asf,ogg,nut,gif,rawvideo")
PROTOCOLS = {  # what FFmpeg may open under each scheme (nested opens included)
    "file": "file",
    "rtsp": "rtsp,rtp,srtp,udp,tcp",
    "rtsps": "rtsps,rtsp,rtp,srtp,udp,tcp,tls",
    "rtmp": "rtmp,tcp",
    "rtmps": "rtmps,rtmp,tcp,tls",
    "http": "http,tcp",
    "https": "https,http,tcp,tls,crypto",
    "tcp": "tcp",
    "udp": "udp",
}
NETWORK_FORMATS = {"http": VIDEO_FORMATS + ",hls", "https": VIDEO_FORMATS + ",hls", "tcp": VIDEO_FORMATS,
                   "udp": VIDEO_FORMATS}


class NotAllowed(ValueError):
    """The URL is well formed, and the policy refuses it (a scheme, a host, listening)."""


class NoSuchFile(ValueError):
    """No such video file under the media folders (which is all a file outside them hears)."""


@dataclass(frozen=True)
class SourcePolicy:
    """What stream URLs may open. `media_dirs` empty: no file streams at all; `hosts`
    empty: any host. Hosts are names (`cam.local`, `*.cams.example`) or networks
    (`10.0.0.0/8`, `127.0.0.1`); a name is compared as written, it is not resolved."""

    media_dirs: tuple[Path, ...] = ()
    schemes: tuple[str, ...] = DEFAULT_SCHEMES
    hosts: tuple[str, ...] = ()
    allow_listen: bool = False
    _networks: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.schemes) - set(ALL_SCHEMES))
        if unknown:
            raise ValueError(f"url_schemes: unknown {unknown}; known: {list(ALL_SCHEMES)}")
        networks = []
        for h in self.hosts:
            try:
                networks.append(ipaddress.ip_network(h, strict=False))
            except ValueError:
                if not re.fullmatch(r"(\*\.)?[A-Za-z0-9.-]+", h):
                    raise ValueError(f"url_hosts: {h!r} is neither a host name nor an address or network") from None
        object.__setattr__(self, "_networks", tuple(networks))

    def host_allowed(self, host: str) -> bool:
        if not self.hosts:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            address = None
        if address is not None:
            return any(address in n for n in self._networks)
        host = host.lower().rstrip(".")
        for pattern in (h.lower() for h in self.hosts):
            if pattern.startswith("*.") and host.endswith(pattern[1:]) or host == pattern:
                return True
        return False


def scheme_of(url: str) -> str:
    """The scheme Vigil treats the URL as: `file` for paths, `v4l2` for /dev/videoN."""
    if DEVICE_PATTERN.fullmatch(url):
        return "v4l2"
    if "://" not in url:
        return "file"
    return urlsplit(url).scheme.lower()


def is_live_url(url: str) -> bool:
    return scheme_of(url) not in ("file", "synthetic")


def file_path(url: str) -> Path:
    """The path a `file` URL names: a plain path as given, `file:///a%20b.mp4` unquoted."""
    return Path(unquote(urlsplit(url).path)) if "://" in url else Path(url)


def check_url(url: str, policy: SourcePolicy, cwd: Path | None = None) -> str:
    """The URL to open if the policy allows it (a file as an absolute, resolved path);
    ValueError naming the rule otherwise. A file outside the media folders is refused
    before anything tells whether it exists."""
    if not isinstance(url, str) or not url or len(url) > 4096 or any(ord(c) < 32 or ord(c) == 127 for c in url):
        raise ValueError("url: give a URL or path of at most 4096 printable characters")
    scheme = scheme_of(url)
    if scheme not in ALL_SCHEMES:
        raise ValueError(f"url: unknown scheme {scheme!r}; use rtsp://, http(s)://, /dev/videoN, "
                         "synthetic:// or a file path")
    if scheme not in policy.schemes:
        raise NotAllowed(f"url: scheme {scheme!r} is not allowed here (limits.url_schemes: {list(policy.schemes)})")
    if scheme == "file":
        return str(_media_file(url, policy, cwd or Path.cwd()))
    if scheme in ("synthetic", "v4l2"):
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not host:
        raise ValueError(f"url: {redact_url(url)} names no host")
    listens = scheme in LISTEN_SCHEMES or any("listen" in k.lower() for k, _ in parse_qsl(parts.query, True))
    if listens and not policy.allow_listen:
        raise NotAllowed(f"url: {redact_url(url)} would make the server listen for a sender; that is off "
                         "(limits.allow_listen)")
    if not policy.host_allowed(host):
        raise NotAllowed(f"url: host {host!r} is not in limits.url_hosts")
    return url


def _media_file(url: str, policy: SourcePolicy, cwd: Path) -> Path:
    raw = file_path(url)
    if not policy.media_dirs:
        raise NotAllowed("url: file streams are off (limits.media_dirs is empty)")
    roots = [Path(d).resolve() for d in policy.media_dirs]
    candidates = [raw] if raw.is_absolute() else [cwd / raw, *(r / raw for r in roots)]
    for candidate in candidates:
        try:
            path = candidate.resolve()  # symlinks followed: the target must be inside too
            if any(path == r or r in path.parents for r in roots) and path.is_file():
                return path
        except OSError:  # a name too long, a loop of links: no such file either
            continue
    shown = ", ".join(_shown_dir(d) for d in policy.media_dirs)
    raise NoSuchFile(f"url: no video file {str(raw)!r} under the media folders ({shown}; limits.media_dirs)")


def _shown_dir(d: Path) -> str:
    """A media folder as the config names it, not as an absolute path of this machine."""
    try:
        return str(Path(d).resolve().relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return Path(d).name


def ffmpeg_options(url: str) -> dict[str, str]:
    """The whitelists a URL is opened with (avformat options)."""
    scheme = scheme_of(url)
    options = {}
    if scheme in PROTOCOLS:
        options["protocol_whitelist"] = PROTOCOLS[scheme]
    if scheme == "file":
        options["format_whitelist"] = VIDEO_FORMATS
    elif scheme in NETWORK_FORMATS:
        options["format_whitelist"] = NETWORK_FORMATS[scheme]
    return options


# -- redaction ---------------------------------------------------------------------------------
def redact_url(url: str) -> str:
    """Hide credentials: everything before the last '@' of the authority (a password
    may hold '/', '#' or '@'), and the values of secret-looking query keys:
    rtsp://user:pass@host/x -> rtsp://***@host/x, ...?password=x -> ...?password=***."""
    if "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    if "@" in rest:
        rest = "***@" + rest.rsplit("@", 1)[1]
    return f"{scheme}://{_redact_query(rest)}"


def _redact_query(rest: str) -> str:
    if "?" not in rest:
        return rest
    head, query = rest.split("?", 1)
    fragment = ""
    if "#" in query:
        query, fragment = query.split("#", 1)
        fragment = "#" + fragment
    pairs = []
    for pair in query.split("&"):
        key, eq, _ = pair.partition("=")
        pairs.append(f"{key}=***" if eq and _is_secret(key) else pair)
    return f"{head}?{'&'.join(pairs)}{fragment}"


def _is_secret(key: str) -> bool:
    k = unquote(key).lower()
    return any(k == s or k.endswith(("_" + s, "-" + s)) for s in SECRET_KEYS)


def secrets_of(url: str) -> list[str]:
    """The secret pieces of a URL (userinfo, secret query values), longest first: what
    `scrub` removes from text that may quote the URL, such as a decoder's error."""
    if "://" not in url:
        return []
    rest = url.split("://", 1)[1]
    found = []
    if "@" in rest:
        userinfo = rest.rsplit("@", 1)[0]
        found += [userinfo, *userinfo.split(":", 1)]
    if "?" in rest:
        for pair in rest.split("?", 1)[1].split("#", 1)[0].split("&"):
            key, eq, value = pair.partition("=")
            if eq and value and _is_secret(key):
                found.append(value)
    found = [s for s in found if len(s) >= 3]  # a one-letter user name would blank out every such letter
    found += [unquote(s) for s in found]
    return sorted(set(found), key=len, reverse=True)


def scrub(text: str, url: str, shown: str | None = None) -> str:
    """`text` with the URL replaced by `shown` (default: the URL redacted) and every
    secret of it by ***."""
    text = text.replace(url, redact_url(url) if shown is None else shown)
    for secret in secrets_of(url):
        text = text.replace(secret, "***")
    return text
