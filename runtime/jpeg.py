"""An RGB frame as JPEG bytes, for what the server hands out: the dashboard's latest
frames (runtime/live_frames.py) and gRPC images (vigil/grpc_api.py)."""

from __future__ import annotations

import cv2
import numpy as np


def rgb_jpeg(rgb: np.ndarray, quality: int) -> bytes:
    """ValueError naming the shape when OpenCV cannot encode it."""
    ok, encoded = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError(f"a frame of shape {rgb.shape} could not be encoded as JPEG")
    return encoded.tobytes()
