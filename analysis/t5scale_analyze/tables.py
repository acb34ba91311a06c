"""The runs table: one row per run (its run file, joined with the files of its attempts on other grids) with
every root attribute (but config_yaml) of its newest file, every config key as `cfg.<section>.<key>`, every
summary figure, its attempts and a few derived figures; written as CSV and Parquet."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from .runfile import Run, attempt_count, attempt_hours, extra_figures

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


def derived_figures(attrs: dict, summary: dict, cfg: dict, hours: tuple | None = None) -> dict:
    """Throughput over the training time, node-/GPU-hours, the node-hours charged (node-hours x the share of each
    node the run held, node_share_fraction; whole nodes for a file from before it was recorded), GPU energy in kJ
    and the cost at the low-priority price (cost.low_priority_price_per_node_hour_usd, on the node-hours charged;
    NaN when not set, like the dedicated price). `hours`: (node-hours, GPU-hours) when the run's files ran on other
    grids (runfile.attempt_hours); by default nodes and world size x wall time."""
    wall_time_s = float(summary.get("wall_time_s", math.nan))
    if hours is None:
        hours = (float(attrs.get("nodes", math.nan)) * wall_time_s / 3600.0,
                 float(attrs.get("world_size", math.nan)) * wall_time_s / 3600.0)
    node_hours, gpu_hours = hours
    charged_node_hours = node_hours * float(attrs.get("node_share_fraction", 1.0))
    low_priority_price = float(cfg.get("cfg.cost.low_priority_price_per_node_hour_usd", 0.0) or 0.0)
    return {
        "samples_per_s": _ratio(summary.get("samples_total"), summary.get("train_time_s")),
        "tokens_per_s": _ratio(summary.get("tokens_total"), summary.get("train_time_s")),
        "node_hours": node_hours,
        "gpu_hours": gpu_hours,
        "charged_node_hours": charged_node_hours,
        "gpu_energy_kj": float(summary.get("gpu_energy_kwh", math.nan)) * 3600.0,
        "low_priority_price_per_node_hour_usd": low_priority_price,
        "cost_low_priority_usd": low_priority_price * charged_node_hours if low_priority_price > 0 else math.nan,
    }


def unpriced(attrs: dict) -> bool:
    """Whether the run had no price: its cost is unknown. (Files written before an unpriced cost was NaN hold 0.)"""
    return not (float(attrs.get("price_per_node_hour_usd", 0.0) or 0.0) > 0
                or float(attrs.get("price_per_gpu_hour_usd", 0.0) or 0.0) > 0)


def attempt_columns(run: Run) -> dict:
    """The run's attempts and the files (one per grid) they wrote: `attempt` (0-based index of the newest
    attempt, counted over every file), `attempts`, `attempt_files`, `attempt_world_sizes`, `attempt_nodes` and
    `attempt_steps` (one per file, oldest first: "1,2", "1,1", "1-10,11-20" the steps of its rows that the run's
    rows hold), `attempt_paths` (the files' names) and `unjoined_files` (set-aside files that could not be
    joined)."""
    attempts = run.attempts
    count = attempt_count(run)
    return {
        "attempt": count - 1,
        "attempts": count,
        "attempt_files": len(attempts),
        "attempt_world_sizes": ",".join(str(a.world_size) for a in attempts),
        "attempt_nodes": ",".join(str(a.nodes) for a in attempts),
        "attempt_steps": ",".join(_joined_steps(a) for a in attempts),
        "attempt_paths": ",".join(a.path.name for a in attempts),
        "unjoined_files": ",".join(u.path.name for u in run.unjoined),
    }


def _joined_steps(attempt) -> str:
    """The first and last step of a file's rows that the run's rows hold ("-" for none)."""
    return f"{attempt.first_step}-{attempt.last_joined_step}" if attempt.steps_joined else "-"


def run_row(run: Run) -> dict:
    row = {name: value for name, value in run.attrs.items() if name != "config_yaml"}
    row["file_status"] = row.pop("status", "")
    cfg = flatten_config(run.config)
    row.update(run.summary)  # includes the final "status"
    if unpriced(run.attrs):
        row["cost_usd"] = math.nan  # never $0 for a run without a price
    row.update(derived_figures(run.attrs, run.summary, cfg, attempt_hours(run) if len(run.attempts) > 1 else None))
    row.update(extra_figures(run))
    row.update(attempt_columns(run))
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
