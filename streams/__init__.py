"""Ingest: sources decode each stream once, on their own thread, into frame blocks."""

from streams.blocks import BlockCutter, FrameSampler, cut_blocks
from streams.options import StreamOptions
from streams.source import Source, SourceError, SourceInfo, open_source

__all__ = ["BlockCutter", "FrameSampler", "Source", "SourceError",
           "SourceInfo", "StreamOptions", "cut_blocks", "open_source"]
