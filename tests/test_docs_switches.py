"""docs/switches.md names every environment variable the packages read: a `BW24_*` knob nobody can find is a
knob nobody can reproduce a figure with."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# how the packages read a variable: os.environ.get / [] / getenv, a module constant NAME_ENV = "...", or the
# backend's on/off switch list ("BW24_X", self.x_env, ...). Kernel macros (-DBW24_PLANTED_...) are not read this way.
READ = re.compile(r"""(?:environ\.get\(\s*|environ\[\s*|getenv\(\s*|_ENV\s*=\s*)["'](BW24_[A-Z0-9_]+)["']"""
                  r"""|\(\s*["'](BW24_[A-Z0-9_]+)["'],\s*self\.\w+_env""")
ROW = re.compile(r"^\| `(BW24_[A-Z0-9_]+)` \|", re.MULTILINE)


def variables_read(sources: list[str]) -> set[str]:
    return {a or b for text in sources for a, b in READ.findall(text)}


def documented(doc: str) -> set[str]:
    return set(ROW.findall(doc))


def test_every_variable_read_has_a_row_in_the_switches_table():
    sources = [p.read_text() for p in sorted(ROOT.glob("packages/*/src/**/*.py"))]
    read = variables_read(sources)
    assert len(read) > 40  # the pattern still finds the backend's reads
    rows = documented((ROOT / "docs" / "switches.md").read_text())
    assert not read - rows, f"docs/switches.md lacks a row for {sorted(read - rows)}"
    assert not rows - read, f"docs/switches.md has rows for variables no code reads: {sorted(rows - read)}"


def test_canary_a_new_variable_without_a_row_is_caught():
    code = 'x = os.environ.get("BW24_NEW_KNOB", "1")\nfor v in (("BW24_OTHER", self.other_env, "..."),): pass\n'
    assert variables_read([code]) == {"BW24_NEW_KNOB", "BW24_OTHER"}
    assert "BW24_NEW_KNOB" not in documented((ROOT / "docs" / "switches.md").read_text())
    assert variables_read(['defines += (("BW24_PLANTED_X", 1),)']) == set()  # a kernel macro is not a variable
