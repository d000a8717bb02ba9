"""The committed gRPC modules are exactly what the pinned generator makes of the proto."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from support.processes import run_command

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_generated_code_matches_the_proto(tmp_path):
    (tmp_path / "vigil" / "proto").mkdir(parents=True)
    shutil.copy(ROOT / "vigil/proto/vigil.proto", tmp_path / "vigil/proto/vigil.proto")
    done = run_command([sys.executable, "-m", "grpc_tools.protoc", "-I", ".", "--python_out=.", "--grpc_python_out=.",
                        "vigil/proto/vigil.proto"], 120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for name in ("vigil_pb2.py", "vigil_pb2_grpc.py"):
        assert (tmp_path / "vigil/proto" / name).read_text() == (ROOT / "vigil/proto" / name).read_text(), \
            f"vigil/proto/{name} is stale: run `make proto`"
