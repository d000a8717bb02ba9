"""The package layering of pyproject.toml's import-linter contract holds: each top-level
package imports only those below it, so there is no cycle between them."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_layering_contract_is_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    out = subprocess.run([str(lint)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "1 kept, 0 broken" in out.stdout
