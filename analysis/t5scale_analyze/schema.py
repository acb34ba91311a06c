"""The run file's schema as the trainer's writer declares it: run_file_schema.json beside this module, generated
from the C++ writer's own tables (`cmake --build build --target update_run_file_schema`); the unit test
unit.telemetry_run_file_schema fails when the file and the writer differ. The reader and the test writers take
the format, the version, the columns and the root attributes from here, so that they cannot drift from the files
t5scale-train writes."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np

SCHEMA = json.loads(resources.files(__package__).joinpath("run_file_schema.json").read_text(encoding="utf-8"))
FORMAT: str = SCHEMA["format"]
SCHEMA_VERSION: int = SCHEMA["schema_version"]

_DTYPES = {"int64": np.int64, "int8": np.int8, "float64": np.float64}


def columns(group: str) -> list[dict]:
    """The columns of /steps or /eval in the writer's order: {"name", "dtype", "unit", "per_rank"}."""
    return SCHEMA[group]


def numpy_dtype(column: dict):
    return _DTYPES[column["dtype"]]


def root_attribute_names(set_by: str | None = None) -> list[str]:
    """The root attributes, all or those set by "run file" or "caller"."""
    return [a["name"] for a in SCHEMA["root_attributes"] if set_by is None or a["set_by"] == set_by]


def summary_figures() -> list[dict]:
    """The figures of /summary in the writer's order: {"name", "dtype", "unit"}."""
    return SCHEMA["summary"]
