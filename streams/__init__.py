"""Ingest: sources decode each stream once, on their own thread, into frame blocks."""

from core.frames import Frame, FrameBlock
from streams.blocks import BlockCutter, FrameSampler, cut_blocks
from streams.source import Source, SourceError, SourceInfo, SourceOptions, open_source

__all__ = ["BlockCutter", "Frame", "FrameBlock", "FrameSampler", "Source", "SourceError",
           "SourceInfo", "SourceOptions", "cut_blocks", "open_source"]
