"""The cost/quality Pareto front of each study, over its settings rather than its runs, and only beyond the noise.

A setting is the runs of a study whose configs differ only in the seed, name and folders and that ran on the same
grid and batch: the repeats of one run (settings.py). Its cost and quality (the best eval metric) are the means over
its runs, each with an interval: cost from the least to the most costly run; quality from the worst to the best run,
widened to cover the sampling interval of an eval metric that is a mean over n examples of a score in [0, 1]
(accuracy, exact match, F1, ROUGE), since even a setting run once was measured on a finite sample: Wilson's score
interval at one standard error (sampling_interval), which, unlike q +- sqrt(q (1 - q) / n), does not shrink to
nothing at q = 0 or 1 (accuracy 1.0 on 56 examples: 0.982 ... 1). One setting beats another on an axis only beyond the noise: when their intervals do not overlap. A
setting dominates another when it is not beaten on either axis and beats it on one; the front is the settings that
nothing dominates. Settings within the noise of each other on both axes are therefore all on the front (or all off
it): the front does not rank them.

Only completed runs take part (a running or killed run's cost is not its final cost). The cost is cost_usd when
every such run of the study has one (a price, and the share of its nodes it is charged by); otherwise node-hours
(nodes x wall time), which is the cost of whole nodes up to the price.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .runfile import LOWER_IS_BETTER
from .settings import setting_name, settings_of

COLUMNS = ["study", "setting", "runs", "run_ids", "cost_axis", "cost", "cost_min", "cost_max", "best_metric",
           "best_metric_min", "best_metric_max", "sampling_low", "sampling_high", "quality_low", "quality_high", "metric",
           "eval_examples", "on_front", "dominated_by"]


def front_of(cost_low, cost_high, quality_low, quality_high) -> list:
    """For each point, the indices of the points that dominate it (empty: on the front). Quality is higher-is-
    better here (negate a lower-is-better metric and swap its interval's ends first). A point with a NaN is never
    on the front and dominates nothing."""
    n = len(cost_low)
    valid = [all(math.isfinite(v) for v in (cost_low[i], cost_high[i], quality_low[i], quality_high[i]))
             for i in range(n)]
    dominated_by = []
    for i in range(n):
        if not valid[i]:
            dominated_by.append([-1])
            continue
        by = []
        for j in range(n):
            if j == i or not valid[j]:
                continue
            cheaper = cost_high[j] < cost_low[i]  # j beats i on cost
            costlier = cost_high[i] < cost_low[j]
            better = quality_low[j] > quality_high[i]  # j beats i on quality: the intervals apart
            worse = quality_low[i] > quality_high[j]
            if (cheaper or better) and not (costlier or worse):
                by.append(j)
        dominated_by.append(by)
    return dominated_by


def non_dominated(cost, quality, higher_is_better: bool = True) -> np.ndarray:
    """Boolean mask of the points on the plain Pareto front (exact values, no noise)."""
    cost = np.asarray(cost, dtype=np.float64)
    quality = np.asarray(quality, dtype=np.float64)
    if not higher_is_better:
        quality = -quality
    return np.array([not by for by in front_of(cost, cost, quality, quality)], dtype=bool)


def cost_axis(study: pd.DataFrame) -> str:
    """cost_usd where every run's cost is known (a price, and the node share it is charged by), else node-hours."""
    costs = study["cost_usd"].astype(float) if "cost_usd" in study else None
    if costs is not None and len(costs) and bool(np.isfinite(costs).all()):
        return "cost_usd"
    return "node_hours"


# The sampling interval reaches one standard error each side (z = 1): settings are told apart beyond the noise,
# not at a confidence level.
SAMPLING_Z = 1.0


def wilson_interval(proportion: float, n: float, z: float = SAMPLING_Z) -> tuple:
    """Wilson's score interval (low, high) of a proportion measured on n trials, z standard errors wide each side:
    (q + z^2/2n -+ z sqrt(q (1 - q) / n + z^2/4n^2)) / (1 + z^2/n). Inside [0, 1], and not empty at q = 0 or 1
    (at q = 1 and z = 1 it is n/(n+1) ... 1), where q +- sqrt(q (1 - q) / n) is a single point."""
    z2n = z * z / n
    centre = (proportion + z2n / 2.0) / (1.0 + z2n)
    half = z / (1.0 + z2n) * math.sqrt(proportion * (1.0 - proportion) / n + z2n / (4.0 * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def sampling_interval(metric: str, quality: float, examples: float) -> tuple:
    """The interval a mean over `examples` per-example scores in [0, 1] is measured to: Wilson's score interval.
    For outcomes of 0 or 1 (accuracy, exact match) it is the proportion's; a graded score (F1, ROUGE) of mean q
    varies at most as much as 0/1 outcomes of mean q (variance <= q (1 - q)), so the same interval covers it.
    (quality, quality) for a loss (not bounded) or an unknown count."""
    if metric in LOWER_IS_BETTER or not (examples > 0) or not (0.0 <= quality <= 1.0):
        return quality, quality
    return wilson_interval(quality, examples)


def pareto_table(runs: pd.DataFrame, metric: str | None) -> pd.DataFrame:
    best = f"best_{metric}"
    if metric is None or runs.empty or best not in runs or "status" not in runs:
        return pd.DataFrame(columns=COLUMNS)
    completed = runs[runs["status"] == "completed"]
    higher_is_better = metric not in LOWER_IS_BETTER
    parts = []
    for study_name, study in completed.groupby("study", sort=True, dropna=False):
        axis = cost_axis(study)
        rows = []
        for labels in settings_of(study):
            group = study.loc[labels]
            cost = group[axis].astype(float)
            quality = group[best].astype(float)
            examples = group["eval_examples"].astype(float).min() if "eval_examples" in group else math.nan
            mean_q = float(quality.mean())
            sampling_low, sampling_high = sampling_interval(metric, mean_q, examples)
            rows.append({"study": study_name, "setting": setting_name(list(group["run_id"])), "runs": len(group),
                         "run_ids": ",".join(str(r) for r in group["run_id"]), "cost_axis": axis,
                         "cost": float(cost.mean()), "cost_min": float(cost.min()), "cost_max": float(cost.max()),
                         "best_metric": mean_q, "best_metric_min": float(quality.min()),
                         "best_metric_max": float(quality.max()), "sampling_low": sampling_low,
                         "sampling_high": sampling_high, "quality_low": min(float(quality.min()), sampling_low),
                         "quality_high": max(float(quality.max()), sampling_high), "metric": metric,
                         "eval_examples": examples})
        table = pd.DataFrame(rows)
        low, high = (table["quality_low"], table["quality_high"]) if higher_is_better else \
            (-table["quality_high"], -table["quality_low"])
        by = front_of(table["cost_min"].tolist(), table["cost_max"].tolist(), low.tolist(), high.tolist())
        table["on_front"] = [not b for b in by]
        table["dominated_by"] = [",".join(table["setting"].iloc[j] for j in b if j >= 0) for b in by]
        parts.append(table)
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    table = pd.concat(parts, ignore_index=True)[COLUMNS]
    return table.sort_values(["study", "cost", "setting"], kind="stable").reset_index(drop=True)
