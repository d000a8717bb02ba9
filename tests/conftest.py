import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ["pytester"]  # tests/test_suite.py runs pytest on the suite's own rules
sys.path.insert(0, str(ROOT / "tests"))

from core.host import usable_cores  # noqa: E402  (after the path is set)
from support import tiers  # noqa: E402
from support.clips import BUNDLED  # noqa: E402


def pytest_addoption(parser) -> None:
    tiers.add_options(parser)


def pytest_configure(config) -> None:
    tiers.register(config)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist starts its workers
def pytest_sessionstart(session) -> None:
    config = session.config
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput") \
            and not config.option.collectonly:
        from support.profiles import warm_profiles

        warm_profiles(lambda line: config.get_terminal_writer().line(line))


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: a worker per core this process may use. The slow tests' servers and
    runs keep the cores busy themselves: more workers than cores make each test slower,
    not the suite faster, and push waits on a loaded server past their limits."""
    return usable_cores()


@pytest.fixture(scope="session")
def bundled_clips() -> list[Path]:
    assert BUNDLED, "no bundled clips in sample_videos/"
    return BUNDLED


@pytest.fixture(scope="session")
def short_clip(tmp_path_factory) -> tuple[Path, dict]:
    """A 2-second rendered clip with its ground truth (real H.264 through PyAV)."""
    from sample_videos.render import RenderConfig, write_clip

    out = tmp_path_factory.mktemp("clips") / "short.mp4"
    truth = write_clip(RenderConfig(seed=5, duration_s=2.0), out)
    return out, truth
