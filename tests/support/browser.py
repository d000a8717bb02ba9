"""Debian's Chromium, as the dashboard tests drive it with Playwright (no browser download)."""

CHROMIUM = "/usr/bin/chromium"
# Chromium's own background traffic is refused by an offline machine; keep it quiet.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
