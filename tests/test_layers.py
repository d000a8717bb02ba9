"""The package layering of pyproject.toml's import-linter contract holds: each top-level
package imports only those below it, so there is no cycle between them."""

import sys
from pathlib import Path

import pytest

from support.processes import run_command

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_layering_contract_is_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    out = run_command([str(lint)], 300, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "2 kept, 0 broken" in out.stdout
