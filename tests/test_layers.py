"""The house keeps its shape: layers that only point down, no import circle, no private name taken across
modules. Both checks read the source (import-linter's contract in pyproject.toml, and tools/import_cycles.py),
so a new upward import or circle fails `make test`, and with it CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def test_the_layer_contract_holds() -> None:
    lint = Path(sys.executable).parent / "lint-imports"  # installed beside the interpreter (the dev extra)
    done = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Layers point down KEPT" in done.stdout


def test_no_import_circle_and_no_private_import() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "import_cycles.py"), "src", "bunko"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("no import circle and no private import"), done.stdout
