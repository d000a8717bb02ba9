"""The frame path, below the server and the CLI: the pipeline that cuts blocks, sends
them through the engine and hands results to apps (`pipeline`); a live stream's worker
(`worker`), which composes its block loop (`block_loop`, with load control `load`, CPU
priority `cpu_priority`) and its app supervisor (`app_supervisor`, with latest frames
`live_frames`); event snapshots and clips (`snapshots`, `event_clips`); and the
offline run of a file (`offline`, with `video` for the annotated output). What the
cluster swaps in for a stream, an app or the engine is declared in `boundaries`."""
