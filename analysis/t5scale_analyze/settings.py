"""Which runs of a study are repeats of one setting, and which settings are one problem run at several scales: the
one grouping that the scaling table, the LR-scaling points, the Pareto front and the step profile share.

A setting is the runs whose configs differ only in the seed, name and folders (REPEAT_KEYS: what repeats of a run
differ in, and what another attempt may change) and that ran on the same grid and batch (GRID_COLUMNS). Runs of
different step counts, data or learning rates are different settings, never averaged.

A problem is what a run computes apart from how it is spread over devices: the config keys that change what the run
means (those t5scale-train refuses to change on resume, `config_change_needs_permission` in
src/config/config_load.cpp: the model, the data, the optimizer, the LR plan, the precision, the steps; not the
parallel layout, evaluation, checkpoints, telemetry or cost), without the seed, with the global batch as run
(GLOBAL_BATCH_KEYS give it in two spellings), the resolved model and precision, and the kind of device. Speedup
and efficiency compare runs of one problem only; `t5scale-study plan` groups its forecast the same way
(src/study/study_forecast.cpp: scaling_problem).
"""

from __future__ import annotations

import math
import re

import pandas as pd

# Config keys in which the repeats of a run differ.
REPEAT_KEYS = ("cfg.run.name", "cfg.run.seed", "cfg.run.output_dir", "cfg.checkpoint.dir", "cfg.checkpoint.resume")
# The run's grid and batch as it ran (root attributes): runs of one config on other grids are other settings.
GRID_COLUMNS = ("nodes", "gpus_per_node", "world_size", "tp", "dp", "global_batch", "micro_batch",
                "grad_accumulation", "lr_scaling_rule", "effective_lr")

# A repeat's suffix in a run name: baseline-s0, baseline_seed1, base.r2, base3.
REPEAT_SUFFIX = re.compile(r"[-_.]?(?:s|seed|r|rep|repeat)?[0-9]+$")

# What may change without changing what a run computes (config_change_needs_permission's free sections and keys).
LAYOUT_SECTIONS = ("cfg.parallel.", "cfg.eval.", "cfg.early_stopping.", "cfg.checkpoint.", "cfg.telemetry.",
                   "cfg.cost.", "cfg.export.")
LAYOUT_KEYS = ("cfg.run.name", "cfg.run.study", "cfg.run.output_dir", "cfg.run.planned_world_size",
               "cfg.train.log_every", "cfg.train.log_every_s", "cfg.train.micro_batch",
               "cfg.train.grad_accumulation")
# The batch keys' text differs between a fixed global batch and a fixed micro batch that give the same global batch:
# the problem takes the global batch as run instead.
GLOBAL_BATCH_KEYS = ("cfg.train.global_batch", "cfg.train.batch_mode")
# Root attributes of the problem: the global batch as run, the model and precision as resolved.
PROBLEM_COLUMNS = ("global_batch", "model_name", "precision")


def _text(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def setting_columns(study: pd.DataFrame) -> list:
    return [c for c in study.columns if (c.startswith("cfg.") and c not in REPEAT_KEYS) or c in GRID_COLUMNS]


def problem_columns(study: pd.DataFrame) -> list:
    """The columns of the runs table that tell problems apart."""
    config = [c for c in study.columns
              if c.startswith("cfg.") and c != "cfg.run.seed" and c not in GLOBAL_BATCH_KEYS
              and c not in LAYOUT_KEYS and not c.startswith(LAYOUT_SECTIONS)]
    return config + [c for c in PROBLEM_COLUMNS if c in study]


def device_kind(device_names) -> str:
    """The kinds of device a run ran on ("NVIDIA H100 80GB HBM3"), whatever their number."""
    return ",".join(sorted({d.strip() for d in _text(device_names).split(",") if d.strip()}))


def problem_keys(study: pd.DataFrame) -> pd.DataFrame:
    """One column per problem key (and the device kind), one row per run."""
    keys = pd.DataFrame({c: study[c].map(_text) for c in problem_columns(study)}, index=study.index)
    if "device_names" in study:
        keys["device"] = study["device_names"].map(device_kind)
    return keys


def problem_labels(study: pd.DataFrame, ignore: tuple = ()) -> pd.Series:
    """A label per run naming its problem by the keys that vary within the study, but `ignore`d ones ("all" when
    none does)."""
    keys = problem_keys(study)
    varying = [k for k in keys if k not in ignore and keys[k].nunique(dropna=False) > 1]
    if not varying:
        return pd.Series("all", index=study.index, dtype=object)
    return pd.Series([", ".join(f"{k.removeprefix('cfg.')}={row[k]}" for k in varying)
                      for _, row in keys[varying].iterrows()], index=study.index, dtype=object)


def setting_key(row: pd.Series, columns: list) -> tuple:
    return tuple(_text(row[c]) for c in columns)


def settings_of(study: pd.DataFrame) -> list:
    """The study's runs grouped into settings: lists of row labels, in the table's order."""
    columns = setting_columns(study)
    groups = {}
    for label, row in study.iterrows():
        groups.setdefault(setting_key(row, columns), []).append(label)
    return list(groups.values())


def setting_name(run_ids: list) -> str:
    """The runs' common name without a repeat suffix (baseline-s0, baseline-s1 -> baseline), else the first id."""
    stems = {REPEAT_SUFFIX.sub("", str(r)) or str(r) for r in run_ids}
    if len(run_ids) > 1 and len(stems) == 1:
        return stems.pop()
    return str(run_ids[0]) if len(run_ids) == 1 else f"{run_ids[0]} and {len(run_ids) - 1} more"


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
