"""The learning-rate-scaling report: for each study, the chosen eval metric (final and best) against the global
batch for each lr_scaling_rule (none, linear, sqrt), beside the learning rate each rule gave; the loss curves
themselves are drawn by plots.loss_curves_figure from the runs' steps.

Every run is listed, whatever its status: a run that diverged at a large learning rate is part of the answer.
"""

from __future__ import annotations

import pandas as pd

from .runfile import LOWER_IS_BETTER
from .settings import problem_labels

# What an LR-scaling study varies on purpose: the rule and the global batch. Runs that differ in anything else of
# their problem (steps, data, ...) are another variant, never averaged with these (settings.py).
RULE_KEYS = ("global_batch", "cfg.lr_scaling.rule")

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


def batch_mode_of(table: pd.DataFrame) -> pd.Series:
    """The run's batch mode (fixed_micro: the global batch grows with the ranks; fixed_global: it stays), "" when the
    run file does not say."""
    if "cfg.train.batch_mode" in table:
        return table["cfg.train.batch_mode"].fillna("").astype(str)
    return pd.Series([""] * len(table), index=table.index, dtype=str)


def variant_of(table: pd.DataFrame) -> pd.Series:
    """Per run, the keys of its problem beyond the rule and the global batch that vary within its study ("all")."""
    if table.empty:
        return pd.Series([], index=table.index, dtype=object)
    parts = [problem_labels(study, ignore=RULE_KEYS) for _, study in table.groupby("study", sort=False, dropna=False)]
    return pd.concat(parts).reindex(table.index)


def rule_points(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per study, batch mode, variant (variant_of), LR rule and global batch: the final `metric` over the runs there
    (seeds), as mean, min, max and count, k = global batch / reference batch, the mean of the runs at k = 1 of the
    same study, batch mode and variant (k1_mean) and the difference from it. At k = 1 every rule gives the base LR,
    so a run there is a point of every rule's curve. `within_noise`: the runs' range overlaps the k = 1 runs' range, so the difference is not a finding."""
    column = f"final_{metric}"
    columns = ["study", "batch_mode", "variant", "lr_scaling_rule", "global_batch", "k", "effective_lr", "runs", "mean",
               "min", "max", "k1_mean", "delta_vs_k1", "within_noise"]
    if runs.empty or column not in runs or runs[column].isna().all():
        return pd.DataFrame(columns=columns)
    t = runs[runs[column].notna()].copy()
    t["batch_mode"] = batch_mode_of(t)
    t["variant"] = variant_of(t)
    t["value"] = t[column].astype(float)
    t["k"] = t["global_batch"].astype(float) / t["reference_global_batch"].astype(float)
    t["lr_scaling_rule"] = t["lr_scaling_rule"].fillna("none").astype(str)
    shared = []
    for _, group in t.groupby(["study", "batch_mode", "variant"], sort=False, dropna=False):
        rules = sorted(set(group["lr_scaling_rule"]))
        at_k1 = group[group["k"] == 1.0]
        for rule in rules:
            copies = at_k1[at_k1["lr_scaling_rule"] != rule].copy()
            copies["lr_scaling_rule"] = rule
            shared.append(copies)
    t = pd.concat([t] + shared, ignore_index=True)
    keys = ["study", "batch_mode", "variant", "lr_scaling_rule", "global_batch"]
    points = (t.groupby(keys, sort=True, dropna=False)
              .agg(k=("k", "first"), effective_lr=("effective_lr", "first"), runs=("value", "count"),
                   mean=("value", "mean"), min=("value", "min"), max=("value", "max"))
              .reset_index())
    reference = (t[t["k"] == 1.0].groupby(["study", "batch_mode", "variant"], dropna=False)["value"]
                 .agg(ref_mean="mean", ref_min="min", ref_max="max").reset_index())
    points = points.merge(reference, on=["study", "batch_mode", "variant"], how="left")
    points["k1_mean"] = points["ref_mean"]
    points["delta_vs_k1"] = points["mean"] - points["k1_mean"]
    overlap = (points["max"] >= points["ref_min"]) & (points["min"] <= points["ref_max"])
    points["within_noise"] = overlap.astype(object).where(points["ref_mean"].notna(), None)  # None: no k = 1 run
    return points[columns]


def rule_recovery(points: pd.DataFrame, lower_is_better: bool = False) -> pd.DataFrame:
    """Per study and global batch above the reference (k > 1, fixed micro batch): the gap that rule none leaves to
    the k = 1 runs, and the share of it each other rule closes: (rule - none) / (k1 - none) x 100 (100%: as good as
    one rank; above 100%: better; below 0: worse than no rule). A share is given only where rule none is worse than
    k = 1 beyond the noise (the seeds' ranges apart): otherwise there is no gap to close."""
    columns = ["study", "variant", "global_batch", "k", "k1_mean", "none_mean", "gap_none_vs_k1",
               "none_worse_beyond_noise"]
    if points.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    scaled = points[(points["k"] > 1.0) & (points["batch_mode"] != "fixed_global")]
    for (study, variant, batch), group in scaled.groupby(["study", "variant", "global_batch"], sort=True,
                                                         dropna=False):
        by_rule = group.set_index("lr_scaling_rule")
        if "none" not in by_rule.index:
            continue
        none = by_rule.loc["none"]
        k1 = none["k1_mean"]
        worse = (none["mean"] > k1) if lower_is_better else (none["mean"] < k1)
        noise = none["within_noise"]  # None: no k = 1 run to compare with
        gap_is_real = bool(worse) and noise is not None and not pd.isna(noise) and not bool(noise)
        row = {"study": study, "variant": variant, "global_batch": batch, "k": none["k"], "k1_mean": k1,
               "none_mean": none["mean"],
               "gap_none_vs_k1": none["delta_vs_k1"], "none_worse_beyond_noise": gap_is_real}
        for rule in sorted(set(by_rule.index) - {"none"}):
            row[f"{rule}_mean"] = by_rule.loc[rule, "mean"]
            row[f"{rule}_recovered_pct"] = ((by_rule.loc[rule, "mean"] - none["mean"]) / (k1 - none["mean"]) * 100
                                            if gap_is_real else float("nan"))
        rows.append(row)
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=columns)


def rule_tables(runs: pd.DataFrame, metric: str | None) -> tuple:
    """rule_points and rule_recovery for the chosen metric and, beside it, the eval loss ("loss"), one table each
    with a `metric` column first."""
    metrics = [] if metric is None else [metric] + (["loss"] if metric != "loss" else [])
    points, recovery = [], []
    for m in metrics:
        p = rule_points(runs, m)
        if p.empty:
            continue
        points.append(p.assign(metric=m))
        r = rule_recovery(p, lower_is_better=m in LOWER_IS_BETTER)
        if not r.empty:
            recovery.append(r.assign(metric=m))

    def first_metric(tables, empty):
        table = pd.concat(tables, ignore_index=True) if tables else empty
        return table[["metric"] + [c for c in table.columns if c != "metric"]]

    return (first_metric(points, rule_points(pd.DataFrame(), "").assign(metric=None)),
            first_metric(recovery, rule_recovery(pd.DataFrame()).assign(metric=None)))
