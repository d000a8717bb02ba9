# Quick start: `make demo` (run the default apps on a bundled clip), `make test`.
# Each target creates .venv when missing and installs the project with its dev extras.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_OUT ?= demo-out

.PHONY: demo test test-fast install train-detector bench-ingest bench-engine clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/vigil run sample_videos/street_a.mp4 --out $(DEMO_OUT)
	@echo "demo outputs: $(DEMO_OUT)/summary.json $(DEMO_OUT)/events.jsonl $(DEMO_OUT)/annotated.mp4"

test: $(STAMP)
	$(BIN)/python -m pytest

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow"

# Retrain the bundled detector versions (writes configs/models/scenedet/{1,2}).
train-detector: $(STAMP)
	$(BIN)/python -u -m engine.models.train_scenedet --version 1
	$(BIN)/python -u -m engine.models.train_scenedet --version 2

bench-ingest: $(STAMP)
	$(BIN)/vigil bench ingest --json bench-ingest.json

# The full engine benchmark, with Ray Serve as a peer (installs the bench extra).
bench-engine: $(STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	$(BIN)/vigil bench engine --json bench-engine.json

clean:
	rm -rf $(DEMO_OUT) vigil-out .pytest_cache
