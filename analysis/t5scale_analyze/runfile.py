"""Reader for t5scale run files (HDF5, schema 1: see "Run file" in the README).

A run file is opened with SWMR read, which works on a file that its job is still writing and on a file whose job
was killed (SIGKILL) without h5clear. Such a file has no /summary group yet: its summary figures are then computed
from the flushed steps with the same formulas the trainer uses at the end of a run (`summary_from_steps`).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import yaml

from .schema import FORMAT, SCHEMA_VERSION

# The metrics of /eval, in the order a report prefers them when no --metric is given.
EVAL_METRICS = ("rougeL", "rougeLsum", "rouge1", "rouge2", "f1", "exact_match", "accuracy", "macro_f1", "loss")
LOWER_IS_BETTER = {"loss"}

# A rank other than 0 that fails writes "<run>.failed.json" beside the run file: rank 0, which writes the file, may
# be waiting in a collective that never completes and be killed before it can record anything.
FAILURE_NOTE_SUFFIX = ".failed.json"

# A live job flushes its run file every telemetry.flush_every_steps steps and at each evaluation; a file saying
# "running" that nothing has written for this long belongs, almost surely, to a job that was killed (SIGKILL, a
# node lost) without a word: it is reported as "stale" rather than "incomplete". Long evaluations of big models
# stay well under it.
STALE_AFTER_S = 2 * 3600.0

# A file opened by a writer without SWMR (the trainer writing its /summary) is locked for a moment: try again.
OPEN_ATTEMPTS = 3
OPEN_RETRY_WAIT_S = 0.5


class NotARunFile(Exception):
    """The file is not a t5scale run file this reader understands; the message says why."""


@dataclass
class Run:
    path: Path
    attrs: dict  # root attributes, decoded to str / int / float (config_yaml included)
    config: dict  # config_yaml parsed ({} if it does not parse; see notes)
    steps: pd.DataFrame  # the 1-D datasets of /steps, one row per optimizer step
    rank_steps: dict  # the 2-D datasets of /steps: name -> array (rows, world_size)
    evals: pd.DataFrame  # the datasets of /eval, one row per evaluation
    summary: dict  # the file's /summary attributes over the figures computed from the steps
    status: str  # the summary's status; for a file without a summary still saying "running": "failed" when a
    #              rank left a failure note, "stale" when nothing wrote it for STALE_AFTER_S, else "incomplete"
    summary_source: str  # "file" (/summary present) or "steps" (computed from the flushed rows)
    notes: list = field(default_factory=list)  # what the reader had to assume or repair, in words

    @property
    def run_id(self) -> str:
        return str(self.attrs.get("run_id") or self.path.stem)


@dataclass
class Skipped:
    path: Path
    reason: str


def find_run_files(folder) -> list:
    """Every `*.h5` file under `folder`, recursively, sorted (temporary `*.h5.tmp.<pid>` files do not match)."""
    return sorted(p for p in Path(folder).rglob("*.h5") if p.is_file())


def read_folder(folder) -> tuple:
    """Reads every run file under `folder`. Returns (runs, skipped): files that are not readable run files are
    listed in `skipped` with the reason, never raised."""
    runs, skipped = [], []
    for path in find_run_files(folder):
        try:
            runs.append(read_run(path))
        except NotARunFile as e:
            skipped.append(Skipped(path, str(e)))
    return runs, skipped


def decode(value):
    """An HDF5 attribute value as a plain Python value: fixed-length strings to str, numpy scalars to int/float."""
    if isinstance(value, np.ndarray):
        if value.size == 1:
            value = value.reshape(()).item()
        else:
            return [decode(v) for v in value.tolist()]
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).rstrip(b"\0").decode("utf-8", errors="replace")
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _open(path: Path) -> h5py.File:
    last_error = None
    for _ in range(OPEN_ATTEMPTS):
        try:
            return h5py.File(path, "r", swmr=True)
        except OSError as e:
            last_error = e
            # Only a lock held by a writer is worth waiting for; a file that is not HDF5 will not become one.
            if "lock" not in str(e).lower():
                break
            time.sleep(OPEN_RETRY_WAIT_S)
    if "lock" in str(last_error).lower():
        raise NotARunFile(f"locked by a process writing it without SWMR (a job writing its /summary at the end); "
                          f"run the analysis again in a moment ({last_error})")
    raise NotARunFile(f"cannot be opened as HDF5: {last_error}")


def read_failure_note(path: Path) -> dict | None:
    """The failure note "<run>.failed.json" beside run file `path` ({"rank", "error", "step", ...}), or None."""
    note_path = path.with_suffix(FAILURE_NOTE_SUFFIX)
    try:
        note = json.loads(note_path.read_text())
    except (OSError, ValueError):
        return None
    return note if isinstance(note, dict) else None


def read_run(path, now: float | None = None) -> Run:
    """Reads one run file; `now` (seconds since the epoch; default the clock) decides whether it is stale."""
    path = Path(path)
    with _open(path) as f:
        attrs = {name: decode(f.attrs[name]) for name in f.attrs}
        fmt = attrs.get("format")
        if fmt != FORMAT:
            raise NotARunFile(f"format attribute is {fmt!r}, not {FORMAT!r}" if fmt is not None
                              else f"no 'format' attribute: not a {FORMAT} file")
        version = attrs.get("schema_version")
        if version != SCHEMA_VERSION:
            raise NotARunFile(f"schema_version {version!r}: this reader reads schema {SCHEMA_VERSION}")
        notes = []
        steps, rank_steps = _read_table(f, "steps", notes)
        evals, _ = _read_table(f, "eval", notes)
        file_summary = {name: decode(v) for name, v in f["summary"].attrs.items()} if "summary" in f else None

    config = {}
    try:
        parsed = yaml.safe_load(attrs.get("config_yaml") or "") or {}
        if isinstance(parsed, dict):
            config = parsed
        else:
            notes.append("config_yaml is not a mapping; no cfg.* columns")
    except yaml.YAMLError as e:
        notes.append(f"config_yaml does not parse ({str(e).splitlines()[0]}); no cfg.* columns")

    summary = summary_from_steps(attrs, steps, rank_steps, evals)
    file_status = attrs.get("status", "")
    if file_summary is not None:
        # The trainer's own figures win (its wall time includes the end of the run after the last row); the
        # computed ones fill any key the file lacks.
        summary.update({k: v for k, v in file_summary.items() if v is not None})
        status = str(file_summary.get("status") or file_status or "unknown")
        source = "file"
    else:
        source = "steps"
        note = read_failure_note(path) if file_status == "running" or not file_status else None
        idle_s = (time.time() if now is None else now) - path.stat().st_mtime
        if note is not None:
            status = "failed"
            summary["error"] = str(note.get("error", ""))
            summary["error_step"] = note.get("step", -1)
            notes.append(f"rank {note.get('rank', '?')} failed after step {note.get('step', '?')}: "
                         f"{note.get('error', '')} ({path.with_suffix(FAILURE_NOTE_SUFFIX).name}); figures are "
                         f"computed from the {len(steps)} flushed steps")
        elif (file_status == "running" or not file_status) and idle_s > STALE_AFTER_S:
            status = "stale"
            notes.append(f"no /summary, status {file_status!r}, and nothing written for {idle_s / 3600:.1f} h: the "
                         f"job was most likely killed (SIGKILL, a lost node); figures are computed from the "
                         f"{len(steps)} flushed steps")
        elif file_status == "running" or not file_status:
            status = "incomplete"
            notes.append(f"no /summary and status {file_status!r}: the job is still writing this file or was "
                         f"killed before its end (the file cannot tell which); figures are computed from the "
                         f"{len(steps)} flushed steps")
        else:
            status = file_status
            if file_status == "failed":
                summary["error"] = str(attrs.get("error", ""))
                summary["error_step"] = attrs.get("error_step", -1)
                notes.append(f"failed after step {attrs.get('error_step', '?')}: {attrs.get('error', '')}")
            notes.append(f"no /summary; figures are computed from the {len(steps)} steps")
    summary["status"] = status
    return Run(path=path, attrs=attrs, config=config, steps=steps, rank_steps=rank_steps, evals=evals,
               summary=summary, status=status, summary_source=source, notes=notes)


def _read_table(f: h5py.File, group: str, notes: list) -> tuple:
    """The datasets of /steps or /eval as (DataFrame of the 1-D ones, {name: 2-D array}), cut to the rows that
    every dataset holds and that a writer really wrote (see `_written_rows`)."""
    if group not in f or not isinstance(f[group], h5py.Group):
        notes.append(f"no /{group} group")
        return pd.DataFrame(), {}
    datasets = {name: ds for name, ds in f[group].items() if isinstance(ds, h5py.Dataset) and ds.ndim in (1, 2)}
    if not datasets:
        return pd.DataFrame(), {}
    lengths = {name: ds.shape[0] for name, ds in datasets.items()}
    rows = min(lengths.values())
    if max(lengths.values()) != rows:
        # A writer killed between extending one dataset and the next leaves them one row apart.
        notes.append(f"/{group} datasets differ in length ({min(lengths.values())}..{max(lengths.values())} rows); "
                     f"read the {rows} rows they all hold")
    columns, per_rank = {}, {}
    for name, ds in datasets.items():
        data = ds[:rows] if rows else np.zeros((0,) + ds.shape[1:], dtype=ds.dtype)
        if ds.ndim == 1:
            columns[name] = data
        else:
            per_rank[name] = np.asarray(data, dtype=np.float64)
    table = pd.DataFrame(columns)
    written = _written_rows(table, strictly_increasing=(group == "steps"))
    if written < len(table):
        notes.append(f"/{group}: {len(table) - written} trailing rows hold no data (extended but not written "
                     f"before the writer stopped); read the first {written}")
        table = table.iloc[:written].reset_index(drop=True)
        per_rank = {name: a[:written] for name, a in per_rank.items()}
    return table, per_rank


def _written_rows(table: pd.DataFrame, strictly_increasing: bool) -> int:
    """Rows are written in step order and wall time never goes back, so the first row whose step is a fill value
    (-1), or goes back (or stands still in /steps, one row per optimizer step; /eval may evaluate twice at one
    step), or whose wall_time_s goes back, is a row that was extended but never written."""
    if "step" not in table:
        return len(table)
    step = table["step"].to_numpy()
    wall = _column(table, "wall_time_s")
    for i in range(len(table)):
        if step[i] < 0:
            return i
        if i == 0:
            continue
        if step[i] < step[i - 1] or (strictly_increasing and step[i] == step[i - 1]):
            return i
        if wall[i] < wall[i - 1]:  # False when either is NaN
            return i
    return len(table)


# ---------------------------------------------------------------------------------------------------------------
# Summary figures computed from the rows, for files without /summary (running or killed jobs).


def _column(table: pd.DataFrame, name: str) -> np.ndarray:
    if name in table:
        return table[name].to_numpy(dtype=np.float64)
    return np.full(len(table), np.nan)


def _nan_if_empty(fn, values: np.ndarray) -> float:
    """fn over the values; NaN for no values, and NaN when any value is NaN (an unknown value makes the figure
    unknown, as in the trainer's summary)."""
    return float(fn(values)) if values.size else math.nan


def _last_row(per_rank, world: int) -> np.ndarray:
    """The newest row of a cumulative per-rank counter (rows, world): NaN per rank without rows."""
    if per_rank is None or len(per_rank) == 0:
        return np.full(world, np.nan)
    return per_rank[-1]


def _cpu_total_j(last: np.ndarray, nodes: int) -> float:
    """CPU energy is per node (every rank of a node reads the same package counters; ranks are consecutive per
    node): one value per node, from the lowest rank on it that has one, summed over nodes."""
    per_node = len(last) // max(nodes, 1) or 1
    total = 0.0
    for node in range(max(nodes, 1)):
        values = last[node * per_node:(node + 1) * per_node]
        known = values[np.isfinite(values)]
        total += known[0] if known.size else math.nan
    return total


def metric_figures(evals: pd.DataFrame) -> dict:
    """final_<m>, best_<m>, best_<m>_step for each eval metric with a finite value: final is the newest
    evaluation that computed it, best the lowest (loss) or highest (the rest) at the earliest step reaching it."""
    figures = {}
    if evals.empty or "step" not in evals:
        return figures
    for m in EVAL_METRICS:
        values = _column(evals, m)
        finite = np.isfinite(values)
        if not finite.any():
            continue
        steps = evals["step"].to_numpy()[finite]
        values = values[finite]
        best_index = int(np.argmin(values) if m in LOWER_IS_BETTER else np.argmax(values))
        figures[f"final_{m}"] = float(values[-1])
        figures[f"best_{m}"] = float(values[best_index])
        figures[f"best_{m}_step"] = int(steps[best_index])
    return figures


def summary_from_steps(attrs: dict, steps: pd.DataFrame, rank_steps: dict, evals: pd.DataFrame) -> dict:
    """The /summary figures from the rows, as the trainer computes them at the end of a run:
    energy_kwh = (gpu_j + cpu_j) / 3.6e6 * pue over the measured sources (energy_source_* not "none"; NaN when
    neither is), with gpu_j the sum over ranks and cpu_j the sum over nodes of the newest row's counters;
    co2_kg = energy_kwh * carbon_intensity_g_per_kwh / 1000; cost_usd = price_per_node_hour_usd * nodes *
    wall_time_s / 3600, with wall_time_s the latest wall time of a step or an evaluation (since the run's first
    start); train_time_s and eval_time_s are sums of step_time_s and eval_time_s; steps_completed counts rows.
    Sums, means and maxima of a column with an unknown (NaN) value are NaN."""
    world = int(attrs.get("world_size", 1) or 1)
    nodes = int(attrs.get("nodes", 1) or 1)
    walls = np.concatenate([_column(steps, "wall_time_s"), _column(evals, "wall_time_s")])
    walls = walls[np.isfinite(walls)]
    wall_time_s = float(walls.max()) if walls.size else math.nan

    gpu_measured = attrs.get("energy_source_gpu", "none") != "none"
    cpu_measured = attrs.get("energy_source_cpu", "none") != "none"
    gpu_j = float(np.sum(_last_row(rank_steps.get("gpu_energy_j"), world)))
    cpu_j = _cpu_total_j(_last_row(rank_steps.get("cpu_energy_j"), world), nodes)
    pue = float(attrs.get("pue", 1.0))
    if gpu_measured or cpu_measured:
        energy_kwh = ((gpu_j if gpu_measured else 0.0) + (cpu_j if cpu_measured else 0.0)) / 3.6e6 * pue
    else:
        energy_kwh = math.nan

    price = float(attrs.get("price_per_node_hour_usd", 0.0))
    summary = {
        "end_time_utc": "",
        "wall_time_s": wall_time_s,
        "train_time_s": float(np.sum(_column(steps, "step_time_s"))),
        "eval_time_s": float(np.sum(_column(evals, "eval_time_s"))),
        "steps_completed": len(steps),
        "samples_total": int(steps["samples"].sum()) if "samples" in steps else 0,
        "tokens_total": int(steps["source_tokens"].sum() + steps["target_tokens"].sum())
                        if "source_tokens" in steps and "target_tokens" in steps else 0,
        "gpu_energy_kwh": gpu_j / 3.6e6 if gpu_measured else math.nan,
        "cpu_energy_kwh": cpu_j / 3.6e6 if cpu_measured else math.nan,
        "energy_kwh": energy_kwh,
        "cost_usd": price * nodes * wall_time_s / 3600.0,
        "co2_kg": energy_kwh * float(attrs.get("carbon_intensity_g_per_kwh", 475.0)) / 1000.0,
        "mean_step_time_s": _nan_if_empty(np.mean, _column(steps, "step_time_s")),
        "mean_tokens_per_s": _nan_if_empty(np.mean, _column(steps, "tokens_per_s")),
        "mean_mfu": _nan_if_empty(np.mean, _column(steps, "mfu")),
        "peak_memory_bytes": _per_rank_stat(rank_steps, "memory_peak_bytes", np.max),
        "mean_memory_allocated_bytes": _per_rank_stat(rank_steps, "memory_allocated_bytes", np.mean),
        "peak_host_memory_bytes": _per_rank_stat(rank_steps, "host_memory_bytes", np.max),
        "total_flops": float(np.sum(_column(steps, "model_flops"))),
    }
    summary.update(metric_figures(evals))
    return summary


def _per_rank_stat(rank_steps: dict, name: str, fn) -> float:
    a = rank_steps.get(name)
    return math.nan if a is None else _nan_if_empty(fn, a.ravel())


def extra_figures(run: Run) -> dict:
    """Figures the card shows that /summary does not hold: mean GPU power, last train loss, last epoch."""
    loss = _column(run.steps, "loss")
    finite_loss = loss[np.isfinite(loss)]
    return {
        "mean_gpu_power_w": _per_rank_stat(run.rank_steps, "gpu_power_w", np.mean),
        "last_train_loss": float(finite_loss[-1]) if finite_loss.size else math.nan,
        "last_epoch": float(run.steps["epoch"].iloc[-1]) if len(run.steps) and "epoch" in run.steps else math.nan,
    }


def cpu_only(device_names) -> bool:
    """Whether a run's device_names attribute ("cpu,cpu,...") names CPU ranks only: the run had no GPU."""
    return {d.strip() for d in str(device_names).split(",") if d.strip()} == {"cpu"}


def metric_label(metric: str) -> str:
    """The name users know a metric by: the eval loss is "eval_loss" (the train loss is "loss" in /steps)."""
    return "eval_loss" if metric == "loss" else metric


def choose_metric(requested, runs_table) -> str | None:
    """The eval metric to report: `requested` ("eval_loss" or "loss", "rougeL", "f1", ...), or with None or
    "auto" the first of EVAL_METRICS that some run measured (None when no run has an evaluation).
    Raises ValueError for a name that is not an eval metric."""
    if requested in (None, "", "auto"):
        for m in EVAL_METRICS:
            column = f"best_{m}"
            if column in runs_table and np.isfinite(runs_table[column].astype(float)).any():
                return m
        return None
    name = requested.removeprefix("eval_")
    if name not in EVAL_METRICS:
        known = ", ".join(metric_label(m) for m in EVAL_METRICS)
        raise ValueError(f"unknown metric {requested!r}: choose one of {known}")
    return name
