"""The cost/quality Pareto front of each study, over its settings rather than its runs, and only beyond the noise.

A setting is the runs of a study whose configs differ only in the seed, name and folders (REPEAT_KEYS) and that
ran on the same grid and batch (GRID_COLUMNS): the repeats of one run. Its cost and quality (the best eval metric) are the means over its runs, each with an
interval: cost from the least to the most costly run; quality from the worst to the best run, widened to at
least one standard error of an eval metric that is a mean over examples of a score in [0, 1] (accuracy, F1,
ROUGE, exact match: sqrt(q (1 - q) / n) for n eval examples), since even a setting run once was measured on a
finite sample. One setting beats another on an axis only beyond the noise: when their intervals do not overlap.
A setting dominates another when it is not beaten on either axis and beats it on one; the front is the settings
that nothing dominates. Settings within the noise of each other on both axes are therefore all on the front (or
all off it): the front does not rank them.

Only completed runs take part (a running or killed run's cost is not its final cost). The cost is cost_usd when
every such run of the study has a price per node-hour; otherwise node-hours (nodes x wall time), which is the cost
up to the price.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from .runfile import LOWER_IS_BETTER

# Config keys in which the repeats of a run differ.
REPEAT_KEYS = ("cfg.run.name", "cfg.run.seed", "cfg.run.output_dir", "cfg.checkpoint.dir", "cfg.checkpoint.resume")
# The run's grid and batch as it ran (root attributes): runs of one config on other grids are other settings.
GRID_COLUMNS = ("nodes", "gpus_per_node", "world_size", "tp", "dp", "global_batch", "micro_batch",
                "grad_accumulation", "lr_scaling_rule", "effective_lr")
REPEAT_SUFFIX = re.compile(r"[-_.]?(?:s|seed|r|rep|repeat)?[0-9]+$")

COLUMNS = ["study", "setting", "runs", "run_ids", "cost_axis", "cost", "cost_min", "cost_max", "best_metric",
           "best_metric_min", "best_metric_max", "sampling_se", "quality_low", "quality_high", "metric",
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
    prices = study["price_per_node_hour_usd"].astype(float) if "price_per_node_hour_usd" in study else None
    if prices is not None and len(prices) and bool((prices > 0).all()):
        return "cost_usd"
    return "node_hours"


def setting_key(row: pd.Series, columns: list) -> tuple:
    return tuple("" if (isinstance(row[c], float) and math.isnan(row[c])) else str(row[c]) for c in columns)


def setting_name(run_ids: list) -> str:
    """The runs' common name without a repeat suffix (baseline-s0, baseline-s1 -> baseline), else the first id."""
    stems = {REPEAT_SUFFIX.sub("", str(r)) or str(r) for r in run_ids}
    if len(run_ids) > 1 and len(stems) == 1:
        return stems.pop()
    return str(run_ids[0]) if len(run_ids) == 1 else f"{run_ids[0]} and {len(run_ids) - 1} more"


def sampling_se(metric: str, quality: float, examples: float) -> float:
    """One standard error of a mean over `examples` scores in [0, 1]; 0 for a loss or unknown counts."""
    if metric in LOWER_IS_BETTER or not (examples > 0) or not (0.0 <= quality <= 1.0):
        return 0.0
    return math.sqrt(quality * (1.0 - quality) / examples)


def settings_of(study: pd.DataFrame) -> list:
    """The study's runs grouped into settings: lists of row labels, in the table's order."""
    config = [c for c in study.columns if (c.startswith("cfg.") and c not in REPEAT_KEYS) or c in GRID_COLUMNS]
    groups = {}
    for label, row in study.iterrows():
        groups.setdefault(setting_key(row, config), []).append(label)
    return list(groups.values())


def setting_names(runs: pd.DataFrame) -> dict:
    """{run path: the name of its setting} over every run of the table (of every status)."""
    names = {}
    if runs.empty or "path" not in runs:
        return names
    for _, study in runs.groupby("study", sort=False, dropna=False):
        for labels in settings_of(study):
            name = setting_name(list(study.loc[labels, "run_id"]))
            names.update({str(path): name for path in study.loc[labels, "path"]})
    return names


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
            se = sampling_se(metric, mean_q, examples)
            rows.append({"study": study_name, "setting": setting_name(list(group["run_id"])), "runs": len(group),
                         "run_ids": ",".join(str(r) for r in group["run_id"]), "cost_axis": axis,
                         "cost": float(cost.mean()), "cost_min": float(cost.min()), "cost_max": float(cost.max()),
                         "best_metric": mean_q, "best_metric_min": float(quality.min()),
                         "best_metric_max": float(quality.max()), "sampling_se": se,
                         "quality_low": min(float(quality.min()), mean_q - se),
                         "quality_high": max(float(quality.max()), mean_q + se), "metric": metric,
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
