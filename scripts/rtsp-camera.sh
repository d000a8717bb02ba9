#!/usr/bin/env bash
# An RTSP camera to try Vigil with when there is none at hand: serves real footage
# (OpenCV's vtest.avi, or FILE) at rtsp://127.0.0.1:PORT/cam until Ctrl-C, each viewer
# from the clip's start, as a camera serves every viewer. The RTSP server is GStreamer's
# (Debian: python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-bad), which sends
# H.264 as it is, so other footage is first converted once into .cache/ with the venv's PyAV.
# Usage: scripts/rtsp-camera.sh [FILE] [PORT]   (PORT: 8554)
#        scripts/rtsp-camera.sh --check          (exits 0 when the RTSP server can run)
#        scripts/rtsp-camera.sh --packages       (Debian's packages it needs)
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES="python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad"
if [ "${1:-}" = "--packages" ]; then echo "$PACKAGES"; exit 0; fi
SYSTEM_PYTHON=${SYSTEM_PYTHON:-/usr/bin/python3}  # GStreamer's bindings are Debian's, not the venv's
if ! "$SYSTEM_PYTHON" -c "import gi; gi.require_version('Gst', '1.0'); gi.require_version('GstRtspServer', '1.0')
from gi.repository import Gst, GstRtspServer
Gst.init(None)
assert all(Gst.ElementFactory.find(e) for e in ('filesrc', 'qtdemux', 'h264parse', 'rtph264pay'))" >/dev/null 2>&1; then
  echo "rtsp-camera.sh: GStreamer's RTSP server is not installed: run 'make camera-deps' as root, or" \
       "sudo apt-get install $PACKAGES" >&2
  exit 1
fi
[ "${1:-}" = "--check" ] && exit 0
footage=${1:-$(scripts/real-footage.sh)}
port=${2:-8554}
mkdir -p .cache
mp4=.cache/$(basename "${footage%.*}")-h264.mp4
if [ ! -f "$mp4" ]; then
  echo "converting $footage to H.264 in $mp4" >&2
  .venv/bin/python - "$footage" "$mp4" <<'PY'
import sys

import av

with av.open(sys.argv[1]) as src, av.open(sys.argv[2] + ".part", "w", format="mp4") as dst:
    video = src.streams.video[0]
    out = dst.add_stream("libx264", rate=video.average_rate or 25)
    out.width, out.height, out.pix_fmt = video.width, video.height, "yuv420p"
    out.options = {"g": str(int(video.average_rate or 25)), "preset": "veryfast"}  # a keyframe a second
    for frame in src.decode(video):
        dst.mux(out.encode(frame.reformat(format="yuv420p")))
    dst.mux(out.encode(None))
PY
  mv "$mp4.part" "$mp4"
fi
exec "$SYSTEM_PYTHON" scripts/rtsp_server.py "$PWD/$mp4" "$port" cam
