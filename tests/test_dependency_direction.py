"""ARCHITECTURE.md: packages depend in one direction only. Checked two ways:
statically (every import statement in every source file) and dynamically (importing a layer must
not drag a forbidden module into sys.modules)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["runtime", "gguf", "tokenizer", "engine", "server", "probe"]
# Which bw24 layers each layer may import. probe -> engine is an optional extra, imported lazily.
ALLOWED = {
    "runtime": set(),
    "gguf": set(),
    "tokenizer": {"gguf"},
    "engine": {"runtime", "gguf", "tokenizer"},
    "server": {"runtime", "gguf", "tokenizer", "engine"},
    "probe": {"runtime", "engine"},
}
# Third-party modules a layer must never import (the GGUF and tokenizer layers are GPU-free).
FORBIDDEN_THIRD_PARTY = {
    "gguf": {"cupy", "torch", "fastapi"},
    "tokenizer": {"cupy", "torch", "fastapi"},
    "runtime": {"torch", "fastapi", "gguf"},
    "engine": {"fastapi", "uvicorn", "torch"},
    "probe": {"fastapi", "torch"},
    "server": {"torch"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _sources(layer: str) -> list[Path]:
    return sorted((ROOT / "packages" / f"bw24-{layer}" / "src" / "bw24" / layer).rglob("*.py"))


def _rel(f: Path) -> str:
    return str(f.relative_to(ROOT)) if f.is_relative_to(ROOT) else str(f)


def violations(layer: str, files: list[Path]) -> list[str]:
    bad = []
    for f in files:
        for mod in _imports(f):
            parts = mod.split(".")
            if parts[0] == "bw24" and len(parts) > 1 and parts[1] != layer and parts[1] not in ALLOWED[layer]:
                bad.append(f"{_rel(f)} imports {mod}")
            if parts[0] in FORBIDDEN_THIRD_PARTY[layer]:
                bad.append(f"{_rel(f)} imports {mod}")
    return bad


@pytest.mark.parametrize("layer", LAYERS)
def test_static_imports_follow_the_layering(layer):
    files = _sources(layer)
    assert files, f"no sources found for bw24.{layer}"
    assert violations(layer, files) == []


def test_checker_catches_a_planted_upward_import(tmp_path):
    """Canary: a gguf module importing the engine (or cupy) must be reported."""
    planted = tmp_path / "bad.py"
    planted.write_text("import cupy\nfrom bw24.engine import Engine\n")
    assert len(violations("gguf", [planted])) == 2


@pytest.mark.parametrize("layer,forbidden", [("gguf", "cupy"), ("tokenizer", "cupy"), ("gguf", "bw24.engine")])
def test_importing_a_layer_does_not_load_forbidden_modules(layer, forbidden):
    code = (
        f"import sys, importlib, pkgutil; m = importlib.import_module('bw24.{layer}');"
        f"[importlib.import_module(i.name) for i in pkgutil.walk_packages(m.__path__, 'bw24.{layer}.')];"
        f"print('{forbidden}' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
