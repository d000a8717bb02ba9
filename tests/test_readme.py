"""The documentation runs: every shell command of the README and of the docs site's pages
(docs/), as a user types it in a checkout.

Each command runs under bash in a folder that holds a copy of the checkout's `configs/`
and a link to its `sample_videos/`, so what commands write (out/, vigil-out/, clips/,
JSON reports) lands there. The commands that talk to a server (`served`) run in page
order against a `vigil serve` of the test's own, on one worker; the rest run offline,
each on whichever worker is free (a folder per worker). The command text is never
rewritten: the CLI's remote commands find the server through `$VIGIL_URL`, and curl
through a `.curlrc` (`connect-to` for localhost:8080, `fail-with-body` so an HTTP error
fails the command); an offline command's `$VIGIL_URL` is a closed port, so one that
needs the server fails. A command runs as written (a synopsis without its optional
`[--flag V]` groups) unless `RUN_AS` gives its quickest form, with flags of its own
line only, or `NOT_RUN` says why it cannot run here; these tables, like `EXPECT`
and `CREATES`, are keyed by the exact command, so a new command runs by default
and a changed or removed one fails `test_tables_name_documented_commands`."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from support.processes import ROOT, VigilServer, run_command, wait_for

pytestmark = pytest.mark.slow

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
SHELL_LANGS = ("sh", "bash", "console", "shell")
# What the commands that talk to the server start with (`vigil ask` without --source too).
SERVED = ("curl ", "vigil streams ", "vigil apps ", "vigil events ", "vigil models add ")
CLOSED_PORT_URL = "http://127.0.0.1:9"  # discard: nothing listens there

# The README's synopsis or slow command -> (what the test runs, why). Only flags of the
# README's own line may be added (checked below).
RUN_AS = {
    "vigil eval detector [--version V] [--json FILE]":
        ("vigil eval detector --version 1 --json eval.json", "one version of the two"),
    "vigil eval detector --footage [--model NAME ...] [--frames N] [--json FILE]":
        ("vigil eval detector --footage --model scenedet --frames 2 --json eval-footage.json",
         "two frames, one detector (tests/vigil/test_footage_eval.py scores coco on every frame)"),
    "vigil eval tracking [--app APP ...] [--clips N] [--json FILE]":
        ("vigil eval tracking --app people-counter-scenedet --json eval-tracking.json",
         "the bundled clips, one app of the two (tests/vigil/test_tracking_eval.py checks both), the report kept"),
    "python -m sample_videos.render --seed 7 --out clips/s7.mp4 [--duration 20] [--size 640x360] [--fps 15] "
    "[--density 1.0] [--quiet 5:12]":
        ("python -m sample_videos.render --seed 7 --out clips/s7.mp4 --duration 2 --size 320x180",
         "a 2-second clip renders the same way as a 20-second one"),
    "vigil bench ingest [--json FILE] [--source CLIP] [--detector scenedet] [--repeats N] [--max-frames N]":
        ("vigil bench ingest --json bench-ingest.json --repeats 1 --max-frames 60", "one short repeat"),
    "vigil bench cluster --sim [--json FILE] [--quick] [--sim-devices N ...] [--arrivals streams|poisson]":
        ("vigil bench cluster --sim --quick --sim-devices 16 --arrivals streams --json bench-cluster.json",
         "16 devices only: 1000 take minutes of simulation"),
    "vigil bench cluster [--json FILE] [--quick] [--sim-devices N ...]":
        ("vigil bench cluster --quick --sim-devices 16 --json bench-cluster-ray.json",
         "shorter phases, and the simulation at 16 devices only"),
}

# README command -> why the test does not run it.
NOT_RUN = {
    "make demo": "the quick start: tests/test_run.py runs its apps on the same footage, and CI runs make test",
    "make test": "the quick start: CI runs it",
    "make camera-deps": "installs Debian's packages as root, in the checkout (the commands run in a copy of "
                        "configs/); CI's make test installs the same packages with the rest (system-deps)",
    "scripts/rtsp-camera.sh": "long-lived; the tour's commands run without a camera (the stream keeps "
                              "reconnecting) and tests/streams start the same RTSP server",
    "vigil serve": "long-lived, on the fixed ports 8080/8081; the test's own server is this command with "
                   "--port, --grpc-port, --data-dir, --models and --config",
    "vigil serve --port 9000 --grpc-port 0 --data-dir /var/lib/vigil --models my-models --config my.yaml":
        "long-lived, and its folders are the user's; these are the flags the test's own server starts with",
    "VIGIL_API_KEYS=key1,key2 vigil serve": "long-lived, on the fixed ports 8080/8081; tests/security start "
                                            "servers with keys",
    "make train-detector": "37 minutes, and it overwrites the bundled weights",
    "python -m tools.train_scenedet --version 1 [--steps N] [--clips N]":
        "even --steps 2 --clips 1 renders six held-out clips to evaluate on: 4 minutes on two shared cores",
    "make bench-engine": "22 minutes, and it installs Ray Serve and the Triton venv",
    "vigil bench engine [--json FILE] [--quick] [--scenario NAME] [--no-ray] [--no-triton] [--contended] [--hogs N]":
        "even --quick --scenario single --no-ray --no-triton took 3.3 minutes on two shared cores",
    "vigil bench llm [--json FILE] [--quick] [--device auto|cpu|cuda] [--trial-s S] [--max-batch N]":
        "even --quick --trial-s 1 --max-batch 4 searches three systems' rates: over 6 minutes on two shared cores",
    "vigil bench llm-features [--quick] [--json FILE] [--device auto|cpu|cuda] [--max-batch N]":
        "even --quick runs SmolLM2 through seven closed batches and 200 structured requests: over 5 minutes on "
        "two shared cores; tests/llm/test_lora.py and tests/llm/test_structured.py check what it measures",
    "vigil bench runtime [--json FILE] [--detector coco] [--repeats N] [--max-frames N]":
        "even --repeats 1 --max-frames 4 profiles both of coco's versions at every batch size in the engine: "
        "107 s on two shared cores; tests/bench/test_runtime.py checks its plain side against the model",
    "vigil bench serve [--json FILE] [--quick] [--device auto|cpu|cuda] [--allocator NAME ...] [--detector coco]":
        "even --quick serves 1, 4 and 16 cameras for half a minute each, about 4 minutes of two whole cores",
}

# README command -> text its stdout must hold.
EXPECT = {
    "vigil run --help": "usage: vigil run",
    "vigil eval tracking [--app APP ...] [--clips N] [--json FILE]": '"followed"',
    "vigil streams add lobby sample_videos/street_a.mp4 --options '{\"loop\": true}'":
        f'"url": "{ROOT / "sample_videos/street_a.mp4"}"',
    "vigil apps add people-counter-scenedet --source lobby --name lobby-people": '"name": "lobby-people"',
    "vigil apps patch lobby-people '{\"slo_ms\": 500, \"priority\": 8}'": '"priority": 8',
    "vigil apps metrics lobby-people": "SLO 500 ms",
    "vigil events list --app lobby-people --type line_cross": "detail",  # the table's last column
    "curl localhost:8080/v1/apps/entrance/metrics": '"slo_ms":2000',
    "vigil models check configs/models/scenedet/2": "scenedet v2: adapter",
    "vigil models check configs/models/scenedet --json": '"version": 2',
    "vigil models add scenedet configs/models/scenedet/2": '"added_version": 3',
}

# README command -> files (relative to the folder it runs in) it must write.
CREATES = {
    "vigil run sample_videos/street_b.mp4 --out out/": ("out/summary.json", "out/events.jsonl", "out/annotated.mp4"),
    "vigil run \"synthetic://street?seed=7&duration=30\"": ("vigil-out/summary.json", "vigil-out/annotated.mp4"),
    "vigil run sample_videos/street_a.mp4 --snapshots --no-video --max-frames 150 --out out/shots/":
        ("out/shots/events.jsonl", "out/shots/summary.json"),
    "vigil run sample_videos/street_a.mp4 --clips --no-video --max-frames 150 --out out/clips/":
        ("out/clips/events.jsonl", "out/clips/summary.json"),
    "vigil eval detector [--version V] [--json FILE]": ("eval.json",),
    "vigil eval detector --footage [--model NAME ...] [--frames N] [--json FILE]": ("eval-footage.json",),
    "vigil eval tracking [--app APP ...] [--clips N] [--json FILE]": ("eval-tracking.json",),
    "python -m sample_videos.render --seed 7 --out clips/s7.mp4 [--duration 20] [--size 640x360] [--fps 15] "
    "[--density 1.0] [--quiet 5:12]": ("clips/s7.mp4", "clips/s7.gt.json"),
    "vigil bench ingest [--json FILE] [--source CLIP] [--detector scenedet] [--repeats N] [--max-frames N]":
        ("bench-ingest.json",),
    "vigil bench cluster --sim [--json FILE] [--quick] [--sim-devices N ...] [--arrivals streams|poisson]":
        ("bench-cluster.json",),
    "vigil bench cluster [--json FILE] [--quick] [--sim-devices N ...]": ("bench-cluster-ray.json",),
}


def strip_comment(line: str) -> str:
    """`line` without a shell comment: a `#` outside quotes, at the start or after a blank."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def shell_commands(text: str) -> list[str]:
    """The commands of the fenced sh/bash/console blocks, continuation lines joined; in a
    console block only `$ ` lines are commands."""
    commands = []
    for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.M | re.S):
        if lang not in SHELL_LANGS:
            continue
        pending = ""
        for line in body.splitlines():
            if lang == "console" and not pending:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            line = strip_comment(line) if not line.rstrip().endswith("\\") else line.rstrip()
            if line.endswith("\\"):
                pending += line[:-1].strip() + " "
                continue
            command = (pending + line.strip()).strip()
            pending = ""
            if command:
                commands.append(command)
    return commands


COMMANDS = list(dict.fromkeys(c for page in PAGES for c in shell_commands(page.read_text())))


def flags(command: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][\w-]*", command))


def required_part(command: str) -> str:
    """A synopsis without its optional `[--flag ...]` groups."""
    return re.sub(r"\s+\[-[^\]]*\]", "", command)




@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A user's checkout as the commands see it: configs/ (a copy, so training and
    profiling write there) and sample_videos/ (a link)."""
    work = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "configs", work / "configs")
    (work / "sample_videos").symlink_to(ROOT / "sample_videos")
    return work


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "VIGIL_URL": CLOSED_PORT_URL}
    for name in ("VIGIL_API_KEYS", "VIGIL_API_KEY"):
        env.pop(name, None)
    return env


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> VigilServer:
    """Started with the flags of the README's second `vigil serve`. Its own, not the
    suite's shared one: `vigil models add` adds a version to the repository it serves
    (a copy here)."""
    base = tmp_path_factory.mktemp("readme-serve")
    shutil.copytree(ROOT / "configs/models", base / "models")
    srv = VigilServer(base / "data", config={}, extra=["--models", str(base / "models")]).start()
    wait_for(lambda: httpx.get(f"{srv.url}/readyz").status_code == 200, 300, "the server restored and loaded")
    yield srv
    assert srv.stop(), srv.logs()[-3000:]


@pytest.fixture(scope="module")
def served_env(server, workdir, env) -> dict[str, str]:
    curl_home = workdir / ".curl"
    curl_home.mkdir()
    port = server.url.rsplit(":", 1)[1]
    (curl_home / ".curlrc").write_text(f"connect-to = localhost:8080:127.0.0.1:{port}\n"
                                       f"connect-to = 127.0.0.1:8080:127.0.0.1:{port}\n"
                                       "fail-with-body\nsilent\nshow-error\n")
    return {**env, "VIGIL_URL": server.url, "CURL_HOME": str(curl_home)}


def test_example_spec_is_the_docs():
    """configs/apps/entrance.yaml, which the documented commands post and run, is the
    spec the docs show."""
    blocks = [yaml.safe_load(body) for page in PAGES
              for body in re.findall(r"^```yaml\n(.*?)^```", page.read_text(), re.M | re.S)]
    shown = [b for b in blocks if isinstance(b, dict) and b.get("name") == "entrance"]
    assert shown == [yaml.safe_load((ROOT / "configs/apps/entrance.yaml").read_text())]


def test_tables_name_documented_commands():
    assert COMMANDS, "no shell commands in the README or docs/"
    for table in (RUN_AS, NOT_RUN, EXPECT, CREATES):
        stale = sorted(set(table) - set(COMMANDS))
        assert not stale, f"not (or no longer) in the README or docs/: {stale}"
    for command, (run_as, _) in RUN_AS.items():
        assert run_as.startswith(required_part(command)), (command, run_as)
        assert flags(run_as) <= flags(command), f"{run_as!r} adds flags the README does not show"
    assert not set(RUN_AS) & set(NOT_RUN)


def run_readme_command(command: str, workdir: Path, env: dict[str, str]) -> None:
    if command in NOT_RUN:
        pytest.skip(NOT_RUN[command])
    run = RUN_AS[command][0] if command in RUN_AS else required_part(command)
    proc = run_command(["bash", "-c", run], 550, cwd=workdir, env=env)
    assert proc.returncode == 0, f"{run}\nexit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    if command in EXPECT:
        assert EXPECT[command] in proc.stdout, f"{run}: {EXPECT[command]!r} not in\n{proc.stdout[-3000:]}"
    for path in CREATES.get(command, ()):
        assert (workdir / path).is_file(), f"{run} did not write {path}"


def served(command: str) -> bool:
    return command.startswith(SERVED) or (command.startswith("vigil ask ") and "--source" not in command)


OFFLINE = [c for c in COMMANDS if not served(c)]
ONLINE = [c for c in COMMANDS if served(c)]


@pytest.mark.parametrize("command", OFFLINE, ids=OFFLINE)
def test_readme_command(command, workdir, env):
    run_readme_command(command, workdir, env)


@pytest.mark.parametrize("command", ONLINE, ids=ONLINE)
def test_served_readme_command(command, workdir, served_env):
    run_readme_command(command, workdir, served_env)
