"""Typed errors of the bench: bad cells or targets files, missing README markers, a failed llama-bench run."""

from __future__ import annotations

from ..errors import BadInputError


class PerfError(BadInputError):
    """Base of the bench's bad-input errors (the CLI turns them into exit code 2)."""


class CellsFileError(PerfError):
    """The cells file is missing, is not TOML, or a cell has a bad or missing field."""


class NoCellsSelectedError(PerfError):
    """--cells matched none of the cells in the file."""


class TableMarkersError(PerfError):
    """The file given to --write lacks the perf-table (or perf-targets) markers, or has them out of order."""


class TargetsFileError(PerfError):
    """The targets file is missing, is not TOML, or a target has a bad or missing field."""


class LlamaBenchError(PerfError):
    """llama-bench failed, or its -o json output lacks the test the cell asked for."""
