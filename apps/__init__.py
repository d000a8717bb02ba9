"""Camera apps: specs, detectors, tracking, line and zone logic, events."""
