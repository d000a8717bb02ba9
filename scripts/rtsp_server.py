"""An RTSP camera made of a video file: GStreamer's gst-rtsp-server serving an H.264 MP4,
for trying Vigil without a camera (scripts/rtsp-camera.sh) and for the tests.

Runs under the system Python (Debian's python3-gi and gir1.2-gst-rtsp-server-1.0), not
the project's venv:  /usr/bin/python3 scripts/rtsp_server.py FILE.mp4 PORT [MOUNT]

Each client that connects gets the clip from its start (the media is not shared), the
way a camera serves every viewer; the clip's H.264 is sent as it is (no re-encoding).
Prints "READY rtsp://127.0.0.1:PORT/MOUNT" once it listens.
"""

import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def main() -> None:
    path, port = sys.argv[1], sys.argv[2]
    mount = sys.argv[3] if len(sys.argv) > 3 else "cam"
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(port)
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(f"( filesrc location={path} ! qtdemux ! h264parse ! "
                       "rtph264pay name=pay0 pt=96 config-interval=1 )")
    factory.set_shared(False)
    server.get_mount_points().add_factory(f"/{mount}", factory)
    if server.attach(None) == 0:
        sys.exit(f"cannot listen on 127.0.0.1:{port}")
    print(f"READY rtsp://127.0.0.1:{port}/{mount}", flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main()
