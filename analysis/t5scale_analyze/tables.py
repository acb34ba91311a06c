"""The runs table: one row per run file with every root attribute (but config_yaml), every config key as
`cfg.<section>.<key>`, every summary figure and a few derived figures; written as CSV and Parquet."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from .runfile import Run, extra_figures

# Shown first, in this order; the rest follows in the file's order.
LEADING_COLUMNS = ("run_id", "study", "status", "nodes", "gpus_per_node", "world_size", "tp", "dp",
                   "global_batch", "micro_batch", "lr_scaling_rule", "effective_lr")


def flatten_config(config: dict, prefix: str = "cfg") -> dict:
    """{"train": {"max_steps": 5}, "precision": "bf16"} -> {"cfg.train.max_steps": 5, "cfg.precision": "bf16"}."""
    flat = {}
    for key, value in config.items():
        name = f"{prefix}.{key}"
        if isinstance(value, dict):
            flat.update(flatten_config(value, name))
        elif isinstance(value, (list, tuple)):
            flat[name] = ",".join(str(v) for v in value)
        else:
            flat[name] = value
    return flat


def _ratio(numerator, denominator) -> float:
    try:
        numerator, denominator = float(numerator), float(denominator)
    except (TypeError, ValueError):
        return math.nan
    return numerator / denominator if denominator > 0 else math.nan


def derived_figures(attrs: dict, summary: dict, cfg: dict) -> dict:
    """Throughput over the training time, node-/GPU-hours, GPU energy in kJ and the cost at the low-priority
    price (cost.low_priority_price_per_node_hour_usd; 0 when not set, like the dedicated price)."""
    wall_time_s = float(summary.get("wall_time_s", math.nan))
    node_hours = float(attrs.get("nodes", math.nan)) * wall_time_s / 3600.0
    low_priority_price = float(cfg.get("cfg.cost.low_priority_price_per_node_hour_usd", 0.0) or 0.0)
    return {
        "samples_per_s": _ratio(summary.get("samples_total"), summary.get("train_time_s")),
        "tokens_per_s": _ratio(summary.get("tokens_total"), summary.get("train_time_s")),
        "node_hours": node_hours,
        "gpu_hours": float(attrs.get("world_size", math.nan)) * wall_time_s / 3600.0,
        "gpu_energy_kj": float(summary.get("gpu_energy_kwh", math.nan)) * 3600.0,
        "low_priority_price_per_node_hour_usd": low_priority_price,
        "cost_low_priority_usd": low_priority_price * node_hours,
    }


def run_row(run: Run) -> dict:
    row = {name: value for name, value in run.attrs.items() if name != "config_yaml"}
    row["file_status"] = row.pop("status", "")
    cfg = flatten_config(run.config)
    row.update(run.summary)  # includes the final "status"
    row.update(derived_figures(run.attrs, run.summary, cfg))
    row.update(extra_figures(run))
    row.update({
        "steps_rows": len(run.steps),
        "eval_rows": len(run.evals),
        "summary_source": run.summary_source,
        "notes": "; ".join(run.notes),
        "path": str(run.path),
    })
    row.update(cfg)
    return row


def runs_table(runs: list) -> pd.DataFrame:
    table = pd.DataFrame([run_row(run) for run in runs])
    if table.empty:
        return table
    leading = [c for c in LEADING_COLUMNS if c in table]
    config_columns = sorted(c for c in table if c.startswith("cfg."))
    others = [c for c in table if c not in leading and c not in config_columns]
    table = table[leading + others + config_columns]
    order = [c for c in ("study", "world_size", "run_id") if c in table]
    return table.sort_values(order, kind="stable").reset_index(drop=True)


def _parquet_safe(table: pd.DataFrame) -> pd.DataFrame:
    """Parquet needs one type per column: a config key that is a number in one run and a string in another
    becomes text (missing values stay missing)."""
    table = table.copy()
    for name in table.columns:
        column = table[name]
        if column.dtype != object:
            continue
        kinds = {type(v) for v in column if v is not None and not (isinstance(v, float) and math.isnan(v))}
        if len(kinds) > 1:
            table[name] = column.map(lambda v: v if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))
    return table


def write_runs_table(table: pd.DataFrame, out_dir: Path) -> list:
    csv_path, parquet_path = out_dir / "runs.csv", out_dir / "runs.parquet"
    table.to_csv(csv_path, index=False)
    _parquet_safe(table).to_parquet(parquet_path, index=False)
    return [csv_path, parquet_path]


def format_number(value) -> str:
    """Numbers in tables: 4 significant digits for floats, integers as they are, NaN as an empty cell."""
    if value is None or value is pd.NA or value is pd.NaT:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return ""
        return f"{value:.4g}"
    return str(value)
