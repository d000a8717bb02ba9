"""How a stream is read: one options type for every source, served (streams/live.py) or
run offline (streams/source.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from core.numbers import json_int
from streams.pacing import REALTIME_OFFLINE, REALTIME_SERVED


class StreamOptions(BaseModel):
    """How a stream is read, by `vigil serve` (ManagedStream) and by `vigil run`
    (open_source). Every number is finite and bounded: a NaN backoff would reconnect in
    a busy loop, an infinite timeout would never give up."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    transport: Literal["tcp", "udp"] = Field("tcp", description="RTSP transport")
    open_timeout_s: float = Field(10.0, gt=0, le=300)
    read_timeout_s: float = Field(10.0, gt=0, le=300)
    backoff_initial_s: float = Field(0.5, ge=0.05, le=3600)
    backoff_max_s: float = Field(10.0, ge=0.05, le=3600, description="the cap; each failure doubles the wait "
                                                                     "up to here (below backoff_initial_s: "
                                                                     "every wait is the cap)")
    max_reconnects: json_int(ge=0, le=1_000_000) | None = Field(None, description="null: forever")
    buffer_frames: json_int(ge=1, le=256) = 32
    # on by default, as a served file stands in for a camera; `vigil run` asks for
    # OFFLINE's (streams/pacing.py says why each)
    realtime: bool = Field(REALTIME_SERVED, description="files: deliver at the clip's frame rate, as the camera "
                                                        "a served file stands in for would (false: as fast as the "
                                                        "apps consume, every sampled frame analysed from when the "
                                                        "first app is attached); a live source keeps its camera's "
                                                        "rate either way")
    loop: bool = Field(False, description="files: start again at the end")
    max_consecutive_errors: json_int(ge=0, le=100_000) = Field(
        25, description="files: undecodable packets in a row tolerated (and counted) before the pass fails; a "
                        "live source tolerates any number, as its next keyframe heals it")


# what `vigil run` and open_source take by default: every frame analysed, however late
OFFLINE = StreamOptions(realtime=REALTIME_OFFLINE)
