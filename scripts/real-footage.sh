#!/usr/bin/env bash
# Prints the path of OpenCV's vtest.avi (a fixed camera over a campus walkway, real
# people), which `make demo` runs the default apps on: Debian's opencv-doc when
# installed, else a copy in .cache/ that `apt-get download opencv-doc` and `dpkg -x`
# fetch without root. Exits 1, saying why on stderr, when neither can be had.
set -euo pipefail
cd "$(dirname "$0")/.."
VTEST=usr/share/doc/opencv-doc/examples/data/vtest.avi
CACHED=.cache/vtest.avi
if [ -f "/$VTEST" ]; then echo "/$VTEST"; exit 0; fi
if [ -f "$CACHED" ]; then echo "$PWD/$CACHED"; exit 0; fi
if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
  echo "no apt-get/dpkg to fetch opencv-doc's vtest.avi" >&2; exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && apt-get download -qq opencv-doc >/dev/null 2>&1); then
  echo "apt-get download opencv-doc failed (run apt-get update, or install opencv-doc)" >&2; exit 1
fi
dpkg -x "$tmp"/opencv-doc_*.deb "$tmp/x"
if [ ! -f "$tmp/x/$VTEST" ]; then echo "opencv-doc holds no $VTEST" >&2; exit 1; fi
mkdir -p .cache
cp "$tmp/x/$VTEST" "$CACHED"
echo "$PWD/$CACHED"
