"""`t5scale-analyze tensorboard RESULTS_DIR --out DIR`: every run of a results folder as TensorBoard event files, a
folder per run (DIR/<study>/<run_id>/), so that `tensorboard --logdir DIR` shows the runs beside those of other
tools. Written with TensorBoard's own event-file writer (the `tensorboard` package, no TensorFlow).

Per run, at each logged step (the event's wall time: the run's start plus the row's wall_time_s):
  train/     loss, lr, grad_norm, loss_scale
  throughput/ samples_per_s, tokens_per_s
  time/      step_time_s and its phases: data, forward, backward, optimizer, comm_exposed (each _s)
  efficiency/ mfu
  memory/    device_peak_gib, device_allocated_gib (max over the ranks), host_gib (max over the ranks)
  power/     gpu_w (sum over the ranks)
and at each evaluation eval/<metric> (loss, ROUGE, exact match, F1, accuracy, macro F1, eval_time_s). A series
that the run never measured (every value NaN: power on CPU ranks, MFU without a known peak) is left out rather
than written as NaN. Text: the run's config (config/yaml, at step 0) and, where the trainer wrote them, the first
generations of each evaluation beside their references (eval/generations).

Exporting again replaces the event files of the runs it writes (the folder's other files are left alone).
"""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np

from .runfile import EVAL_METRICS, generations_by_step, rank_series
from .plots import file_stem

GIB = 1024.0 ** 3
EVENT_FILE_PREFIX = "events.out.tfevents."
GENERATIONS_PER_EVAL = 5

# (tag, /steps column) of the 1-D columns, written as they are
STEP_SCALARS = (
    ("train/loss", "loss"), ("train/lr", "lr"), ("train/grad_norm", "grad_norm"), ("train/loss_scale", "loss_scale"),
    ("throughput/samples_per_s", "samples_per_s"), ("throughput/tokens_per_s", "tokens_per_s"),
    ("time/step_time_s", "step_time_s"), ("time/data_time_s", "data_time_s"),
    ("time/forward_time_s", "forward_time_s"), ("time/backward_time_s", "backward_time_s"),
    ("time/optimizer_time_s", "optimizer_time_s"), ("time/comm_exposed_time_s", "comm_exposed_time_s"),
    ("efficiency/mfu", "mfu"),
)
# (tag, per-rank /steps column, reduction over the ranks, scale)
RANK_SCALARS = (
    ("memory/device_peak_gib", "memory_peak_bytes", "max", 1 / GIB),
    ("memory/device_allocated_gib", "memory_allocated_bytes", "max", 1 / GIB),
    ("memory/host_gib", "host_memory_bytes", "max", 1 / GIB),
    ("power/gpu_w", "gpu_power_w", "sum", 1.0),
)
EVAL_SCALARS = tuple(EVAL_METRICS) + ("eval_time_s",)


def _start_time_s(run) -> float:
    """The run's start (root attribute start_time_utc) in seconds since the epoch; 0 when unknown."""
    text = str(run.attrs.get("start_time_utc", "") or "")
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%d %H:%M:%S"):
        try:
            parsed = datetime.datetime.strptime(text, fmt)
            return parsed.replace(tzinfo=datetime.timezone.utc).timestamp()
        except ValueError:
            continue
    return 0.0


def run_series(run) -> dict:
    """{tag: (steps, wall_time_s since the run's start, values)} of every series the run measured (NaN rows
    dropped; a series without one finite value left out)."""
    series = {}

    def add(tag, steps, wall, values):
        values = np.asarray(values, dtype=np.float64)
        keep = np.isfinite(values)
        if keep.any():
            series[tag] = (np.asarray(steps)[keep].astype(np.int64), np.asarray(wall, dtype=np.float64)[keep],
                           values[keep])

    steps = run.steps
    if len(steps) and "step" in steps:
        wall = steps["wall_time_s"] if "wall_time_s" in steps else np.zeros(len(steps))
        for tag, column in STEP_SCALARS:
            if column in steps:
                add(tag, steps["step"], wall, steps[column])
        for tag, column, reduce, scale in RANK_SCALARS:
            add(tag, steps["step"], wall, rank_series(run, column, reduce) * scale)
    evals = run.evals
    if len(evals) and "step" in evals:
        wall = evals["wall_time_s"] if "wall_time_s" in evals else np.zeros(len(evals))
        for metric in EVAL_SCALARS:
            if metric in evals:
                add(f"eval/{metric}", evals["step"], wall, evals[metric])
    return series


def _markdown_cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:300]


def export_run(run, log_dir: Path) -> dict:
    """Writes the run's event file into log_dir (replacing the event files there); returns {tag: events}."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.text.summary_v2 import text_pb
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob(EVENT_FILE_PREFIX + "*"):
        old.unlink()
    start = _start_time_s(run)
    writer = EventFileWriter(str(log_dir))
    counts = {}
    try:
        for tag, (steps, wall, values) in run_series(run).items():
            for step, wall_s, value in zip(steps, wall, values):
                writer.add_event(Event(wall_time=start + float(wall_s), step=int(step),
                                       summary=Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])))
            counts[tag] = len(values)
        config = str(run.attrs.get("config_yaml", "") or "")
        if config:
            writer.add_event(Event(wall_time=start, step=0, summary=text_pb("config/yaml", f"```\n{config}\n```")))
            counts["config/yaml"] = 1
        for step, rows in sorted(generations_by_step(run, GENERATIONS_PER_EVAL).items()):
            table = ["| index | prediction | reference | source |", "|---|---|---|---|"]
            table += [f"| {r.get('index', '')} | {_markdown_cell(r.get('prediction', ''))} | "
                      f"{_markdown_cell(r.get('reference', ''))} | {_markdown_cell(r.get('source', ''))} |"
                      for r in rows]
            writer.add_event(Event(wall_time=start, step=int(step), summary=text_pb("eval/generations",
                                                                                    "\n".join(table))))
            counts["eval/generations"] = counts.get("eval/generations", 0) + 1
    finally:
        writer.close()
    return counts


def run_log_dir(out_dir: Path, run) -> Path:
    study = str(run.attrs.get("study", "") or "") or "no-study"
    return Path(out_dir) / file_stem(study) / file_stem(run.run_id)


def export(runs: list, out_dir) -> list:
    """Exports every run; returns [(run, its folder, {tag: events})]."""
    out_dir = Path(out_dir)
    written, seen = [], {}
    for run in runs:
        log_dir = run_log_dir(out_dir, run)
        if log_dir in seen:  # two runs of one study with one id (two results folders joined): keep both
            seen[log_dir] += 1
            log_dir = log_dir.with_name(f"{log_dir.name}-{seen[log_dir]}")
        else:
            seen[log_dir] = 0
        written.append((run, log_dir, export_run(run, log_dir)))
    return written
