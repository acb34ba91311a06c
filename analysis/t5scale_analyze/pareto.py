"""The cost/quality Pareto front of each study: cost against the best eval metric; a run is on the front when no
other run of its study is at most as costly and at least as good, and strictly better in one of the two.

Only completed runs take part (a running or killed run's cost is not its final cost). The cost is cost_usd when
every such run of the study has a price per node-hour; otherwise node-hours (nodes x wall time), which is the
cost up to the price.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .runfile import LOWER_IS_BETTER


def non_dominated(cost, quality, higher_is_better: bool = True) -> np.ndarray:
    """Boolean mask of the points on the Pareto front (low cost, good quality); points with a NaN are never on
    it and dominate nothing."""
    cost = np.asarray(cost, dtype=np.float64)
    quality = np.asarray(quality, dtype=np.float64)
    if not higher_is_better:
        quality = -quality
    valid = np.isfinite(cost) & np.isfinite(quality)
    front = valid.copy()
    for i in np.flatnonzero(valid):
        others = valid.copy()
        others[i] = False
        no_worse = (cost <= cost[i]) & (quality >= quality[i])
        better = (cost < cost[i]) | (quality > quality[i])
        if np.any(others & no_worse & better):
            front[i] = False
    return front


def cost_axis(study: pd.DataFrame) -> str:
    prices = study["price_per_node_hour_usd"].astype(float) if "price_per_node_hour_usd" in study else None
    if prices is not None and len(prices) and bool((prices > 0).all()):
        return "cost_usd"
    return "node_hours"


def pareto_table(runs: pd.DataFrame, metric: str | None) -> pd.DataFrame:
    columns = ["study", "run_id", "status", "world_size", "global_batch", "lr_scaling_rule", "cost_axis", "cost",
               "cost_usd", "node_hours", "best_metric", "metric", "on_front"]
    best = f"best_{metric}"
    if metric is None or runs.empty or best not in runs or "status" not in runs:
        return pd.DataFrame(columns=columns)
    completed = runs[runs["status"] == "completed"]
    parts = []
    for _, study in completed.groupby("study", sort=True, dropna=False):
        axis = cost_axis(study)
        part = study.assign(cost_axis=axis, cost=study[axis].astype(float), best_metric=study[best].astype(float),
                            metric=metric)
        part["on_front"] = non_dominated(part["cost"], part["best_metric"], metric not in LOWER_IS_BETTER)
        parts.append(part)
    if not parts:
        return pd.DataFrame(columns=columns)
    table = pd.concat(parts, ignore_index=True)
    table = table[[c for c in columns if c in table]]
    return table.sort_values(["study", "cost", "run_id"], kind="stable").reset_index(drop=True)
