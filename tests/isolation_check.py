"""Import every module of one installed bw24 package (run by `nox -s isolation` in a fresh venv)."""

from __future__ import annotations

import importlib
import pkgutil
import sys

package = sys.argv[1]
mod = importlib.import_module(f"bw24.{package}")
names = [mod.__name__]
for info in pkgutil.walk_packages(mod.__path__, prefix=f"bw24.{package}."):
    names.append(info.name)
    importlib.import_module(info.name)
print(f"bw24.{package}: imported {len(names)} modules alone: OK")
