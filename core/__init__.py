"""The types every stage shares: frames and blocks, detections and classes, events, the clock."""
