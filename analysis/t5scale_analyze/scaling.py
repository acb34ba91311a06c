"""Scaling tables: time per step, throughput, speedup and parallel efficiency, time, cost, energy and CO2 against
world size (GPUs) and nodes, for each study.

Within a study, runs that differ only in scale form a series: same model, TP, precision, optimizer, LR-scaling
rule, strategies and data, and the same batch that the study holds fixed (the global batch in fixed_global mode,
the per-device micro batch otherwise). Speedup is throughput (samples/s over the training time) relative to the
mean throughput of the series' runs at its smallest world size; parallel efficiency is speedup divided by the
growth in world size. Every run with at least one step is a row; its `status` says whether its totals (time,
cost, energy) are final. A run resumed on another world size (its files ran on several grids) is left out: its
throughput mixes grids (`mixed_grid_runs` names them).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# Root attributes and config keys that tell series apart (those that vary within a study name the series).
SERIES_KEYS = ("model_name", "tp", "precision", "optimizer", "lr_scaling_rule",
               "cfg.parallel.zero1", "cfg.parallel.zero2", "cfg.parallel.activation_checkpointing", "cfg.data.dataset",
               "cfg.data.synthetic_examples", "cfg.data.sampling", "cfg.data.max_source_length",
               "cfg.train.freeze_embeddings", "cfg.train.freeze_encoder", "cfg.train.freeze_pattern")

COLUMNS = ("study", "series", "run_id", "status", "nodes", "gpus_per_node", "world_size", "tp", "dp",
           "global_batch", "micro_batch", "steps_completed", "mean_step_time_s", "median_step_time_s",
           "predicted_step_time_s", "step_time_vs_predicted", "samples_per_s", "tokens_per_s",
           "speedup", "parallel_efficiency", "base_world_size", "train_time_s", "wall_time_s", "mean_mfu",
           "cost_usd", "energy_kwh", "co2_kg", "device_names")


def fixed_batch(table: pd.DataFrame) -> pd.Series:
    """The batch a scaling series holds fixed: "global N" in fixed_global mode, "micro N" otherwise (also when
    the run has no config to say)."""
    mode = table["cfg.train.batch_mode"] if "cfg.train.batch_mode" in table else pd.Series("", index=table.index)
    global_batch = table["global_batch"] if "global_batch" in table else pd.Series("?", index=table.index)
    micro_batch = table["micro_batch"] if "micro_batch" in table else pd.Series("?", index=table.index)
    return pd.Series([f"global {g}" if m == "fixed_global" else f"micro {u}"
                      for m, g, u in zip(mode, global_batch, micro_batch)], index=table.index, dtype=object)


def series_labels(study: pd.DataFrame) -> pd.Series:
    """A label per run naming its series by the keys that vary within the study ("all" when none does)."""
    keys = pd.DataFrame({k: study[k] for k in SERIES_KEYS if k in study}, index=study.index)
    keys["batch"] = fixed_batch(study)
    varying = [k for k in keys if keys[k].astype(str).nunique(dropna=False) > 1]
    if not varying:
        return pd.Series("all", index=study.index, dtype=object)
    return pd.Series([", ".join(f"{k.removeprefix('cfg.')}={row[k]}" for k in varying)
                      for _, row in keys.iterrows()], index=study.index, dtype=object)


def mixed_grid(runs: pd.DataFrame) -> pd.Series:
    """Whether each run's attempts ran on more than one world size (attempt_world_sizes "1,2")."""
    if "attempt_world_sizes" not in runs:
        return pd.Series(False, index=runs.index)
    return runs["attempt_world_sizes"].map(lambda sizes: len(set(str(sizes).split(","))) > 1).astype(bool)


def mixed_grid_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that scaling_table leaves out because they ran on several world sizes."""
    if runs.empty:
        return runs
    return runs[mixed_grid(runs)]


def scaling_table(runs: pd.DataFrame) -> pd.DataFrame:
    if runs.empty or "world_size" not in runs or "samples_per_s" not in runs:
        return pd.DataFrame(columns=list(COLUMNS))
    measured = runs[np.isfinite(runs["samples_per_s"].astype(float)) & (runs["world_size"] > 0) & ~mixed_grid(runs)]
    parts = []
    for _, study in measured.groupby("study", sort=True, dropna=False):
        study = study.assign(series=series_labels(study))
        for _, series in study.groupby("series", sort=True):
            base_world = series["world_size"].min()
            base_throughput = series.loc[series["world_size"] == base_world, "samples_per_s"].mean()
            speedup = series["samples_per_s"] / base_throughput
            parts.append(series.assign(base_world_size=base_world, speedup=speedup,
                                       parallel_efficiency=speedup / (series["world_size"] / base_world)))
    if not parts:
        return pd.DataFrame(columns=list(COLUMNS))
    table = pd.concat(parts, ignore_index=True)
    table = table[[c for c in COLUMNS if c in table]]
    return table.sort_values(["study", "series", "world_size", "run_id"], kind="stable").reset_index(drop=True)
