"""The learning-rate-scaling report: for each study, the chosen eval metric (final and best) against the global
batch for each lr_scaling_rule (none, linear, sqrt), beside the learning rate each rule gave; the loss curves
themselves are drawn by plots.loss_curves_figure from the runs' steps.

Every run is listed, whatever its status: a run that diverged at a large learning rate is part of the answer.
"""

from __future__ import annotations

import pandas as pd

BASE_COLUMNS = ("study", "lr_scaling_rule", "global_batch", "reference_global_batch", "base_lr", "effective_lr",
                "run_id", "status", "world_size", "steps_completed", "last_train_loss")


def metric_columns(metric: str | None) -> list:
    return [] if metric is None else [f"final_{metric}", f"best_{metric}", f"best_{metric}_step"]


def lr_scaling_table(runs: pd.DataFrame, metric: str | None) -> pd.DataFrame:
    columns = list(BASE_COLUMNS) + metric_columns(metric)
    if runs.empty:
        return pd.DataFrame(columns=columns)
    table = runs.copy()
    for column in columns:
        if column not in table:
            table[column] = float("nan")
    table = table[columns]
    order = ["study", "lr_scaling_rule", "global_batch", "run_id"]
    return table.sort_values(order, kind="stable").reset_index(drop=True)


def metric_by_batch(table: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per (study, rule, global batch): the mean final and best metric over the runs (repeats) and how many."""
    return (table.groupby(["study", "lr_scaling_rule", "global_batch"], sort=True, dropna=False)
            .agg(runs=("run_id", "count"), final=(f"final_{metric}", "mean"), best=(f"best_{metric}", "mean"))
            .reset_index())
