"""Scaling tables: time per step, throughput, speedup and parallel efficiency, time, cost, energy and CO2 against
world size (GPUs) and nodes, for each study.

Speedup and efficiency answer the study's own question, how much faster the same work runs on more devices: a run
is compared only with runs of the same problem (settings.py: the same model, data, lengths, steps, optimizer, LR
plan, precision and global batch, on the same kind of device; TP, micro batch, accumulation, ZeRO and checkpointing
may differ), and those form its series. The series' reference is its setting (the repeats of one run, averaged) of
the highest throughput (samples/s over the training time) at its smallest world size; speedup is a run's throughput
over the reference's, parallel efficiency is speedup over the growth in world size. A series run on one world size
only has neither (NaN): there is nothing to scale against, and a run whose global batch grows with the ranks is a
point of no other run's series. Every run with at least one step is a row; its `status` says whether its totals
(time, cost, energy) are final. A run resumed on another world size (its files ran on several grids) is left out:
its throughput mixes grids (`mixed_grid_runs` names them).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .settings import problem_labels, setting_name, settings_of

COLUMNS = ("study", "series", "setting", "run_id", "status", "nodes", "gpus_per_node", "world_size", "tp", "dp",
           "global_batch", "micro_batch", "steps_completed", "mean_step_time_s", "median_step_time_s",
           "predicted_step_time_s", "step_time_vs_predicted", "samples_per_s", "tokens_per_s",
           "speedup", "parallel_efficiency", "base_world_size", "reference_setting", "train_time_s", "wall_time_s",
           "mean_mfu", "cost_usd", "energy_kwh", "co2_kg", "device_names")


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


def _with_speedup(series: pd.DataFrame) -> pd.DataFrame:
    """The series' runs with their setting, speedup and efficiency against the series' reference setting."""
    settings = settings_of(series)
    named = series.assign(setting="", speedup=np.nan, parallel_efficiency=np.nan, base_world_size=np.nan,
                          reference_setting="")
    for labels in settings:
        named.loc[labels, "setting"] = setting_name(list(series.loc[labels, "run_id"]))
    if series["world_size"].nunique() < 2:
        return named
    base_world = series["world_size"].min()
    at_base = [labels for labels in settings if series.loc[labels[0], "world_size"] == base_world]
    throughput = {i: float(series.loc[labels, "samples_per_s"].astype(float).mean())
                  for i, labels in enumerate(at_base)}
    reference = at_base[max(throughput, key=throughput.get)]
    speedup = series["samples_per_s"].astype(float) / float(series.loc[reference, "samples_per_s"].astype(float).mean())
    return named.assign(speedup=speedup, parallel_efficiency=speedup / (series["world_size"] / base_world),
                        base_world_size=base_world, reference_setting=named.loc[reference[0], "setting"])


def scaling_table(runs: pd.DataFrame) -> pd.DataFrame:
    if runs.empty or "world_size" not in runs or "samples_per_s" not in runs:
        return pd.DataFrame(columns=list(COLUMNS))
    measured = runs[np.isfinite(runs["samples_per_s"].astype(float)) & (runs["world_size"] > 0) & ~mixed_grid(runs)]
    parts = []
    for _, study in measured.groupby("study", sort=True, dropna=False):
        study = study.assign(series=problem_labels(study))
        for _, series in study.groupby("series", sort=True):
            parts.append(_with_speedup(series))
    if not parts:
        return pd.DataFrame(columns=list(COLUMNS))
    table = pd.concat(parts, ignore_index=True)
    table = table[[c for c in COLUMNS if c in table]]
    return table.sort_values(["study", "series", "world_size", "run_id"], kind="stable").reset_index(drop=True)
