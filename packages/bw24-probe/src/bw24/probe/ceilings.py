"""The measured ceilings live in bw24.runtime.ceilings, so that the engine's perf cells can read the
roofline without importing the probe (the dependency points one way: probe -> runtime). The probe
measures and writes them; this module re-exports that API under its historical name."""

from bw24.runtime.ceilings import (  # noqa: F401
    PACKAGED_DIR,
    READ_METRIC,
    SCHEMA,
    Ceilings,
    CeilingsError,
    CeilingsFormatError,
    CeilingsNotFoundError,
    candidate_paths,
    device_key,
    from_json,
    load,
    load_current,
    now_iso,
    read_file,
    save,
    user_dir,
)
