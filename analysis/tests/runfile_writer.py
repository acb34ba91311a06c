"""Test fixtures: writes run files the way the run-file spec (schema 1) says rank 0 of t5scale-train does.

- libver bounds (v110, latest); created at <path>.tmp.<pid> with every root attribute and every dataset (empty,
  extendible, chunks of 256 rows), closed, renamed to <path>, reopened read-write and switched to SWMR write;
- then only dataset extends/writes and flushes (append_steps, append_eval, flush);
- at the end (finish): close, reopen without SWMR, write the /summary group and set the root status.
Strings are fixed-length, numbers int64 or float64 scalars, unknown floats NaN.

`synthetic_run` writes a run whose numbers are simple enough to work out by hand (constant step time, power and
batch): the tests compare the analysis with those hand-made values.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import h5py
import numpy as np
import yaml

from t5scale_analyze import schema

# The columns as the trainer's writer declares them (t5scale_analyze/run_file_schema.json).
STEP_COLUMNS = {c["name"]: (schema.numpy_dtype(c), c["unit"]) for c in schema.columns("steps") if not c["per_rank"]}
RANK_COLUMNS = {c["name"]: c["unit"] for c in schema.columns("steps") if c["per_rank"]}  # (rows, world_size)
EVAL_COLUMNS = {c["name"]: (schema.numpy_dtype(c), c["unit"]) for c in schema.columns("eval")}
# Columns a fixture may leave out of its rows, and the value they then hold.
DEFAULT_VALUES = {"generated_ids_beyond_vocab": 0}
METRICS = ("loss", "rouge1", "rouge2", "rougeL", "rougeLsum", "exact_match", "f1", "accuracy", "macro_f1")
GIB = 1024 ** 3
CHUNK_ROWS = 256


def set_attr(obj, name: str, value) -> None:
    """Fixed-length UTF-8 strings, int64 and float64 scalars."""
    if isinstance(value, str):
        encoded = value.encode("utf-8")  # an empty string is one NUL byte: HDF5 has no zero-length type
        obj.attrs.create(name, encoded, dtype=h5py.string_dtype("utf-8", max(1, len(encoded))))
    elif isinstance(value, (bool, np.bool_)):
        obj.attrs.create(name, np.int64(value))
    elif isinstance(value, (int, np.integer)):
        obj.attrs.create(name, np.int64(value))
    else:
        obj.attrs.create(name, np.float64(value))


def config_yaml(*, study, run_name, global_batch, micro_batch, max_steps, rule, reference_global_batch, lr,
                price, low_priority_price, carbon, pue, batch_mode="fixed_micro", gpus_per_node=0) -> str:
    config = {
        "run": {"name": run_name, "study": study, "output_dir": f"results/{study}", "seed": 1234},
        "model": {"name": "tiny", "init_from": "", "dropout_rate": -1},
        "data": {"dataset": "synthetic", "tokenizer": "", "max_source_length": 512, "max_target_length": 128,
                 "sampling": "random", "synthetic_vocab_size": 64, "synthetic_examples": 4096},
        "parallel": {"tp": 1, "zero1": False, "activation_checkpointing": False, "bucket_mib": 25,
                     "backend": "auto"},
        "precision": "bf16",
        "train": {"max_steps": max_steps, "epochs": 0, "global_batch": global_batch, "micro_batch": micro_batch,
                  "grad_accumulation": 1, "batch_mode": batch_mode, "max_grad_norm": 1.0, "log_every": 10},
        "optimizer": {"name": "adamw", "lr": lr, "weight_decay": 0.0},
        "lr_schedule": {"warmup_steps": 0, "decay": "constant"},
        "lr_scaling": {"rule": rule, "reference_global_batch": reference_global_batch, "scale_warmup": False},
        "eval": {"every_steps": max(1, max_steps // 2), "at_end": True, "metrics": "loss,rouge"},
        "cost": {"price_per_node_hour_usd": price, "low_priority_price_per_node_hour_usd": low_priority_price,
                 "carbon_intensity_g_per_kwh": carbon, "pue": pue, "gpus_per_node": gpus_per_node},
    }
    return yaml.safe_dump(config, sort_keys=False)


def root_attributes(*, run_id="run", study="study", nodes=1, gpus_per_node=1, tp=1, global_batch=8, micro_batch=8,
                    grad_accumulation=1, base_lr=1e-3, effective_lr=None, lr_scaling_rule="none",
                    reference_global_batch=8, max_steps=10, price=0.0, low_priority_price=0.0, carbon=475.0, pue=1.0,
                    energy_source_gpu="nvml_energy_counter", energy_source_cpu="none",
                    batch_mode="fixed_micro", attempt=0, resumed_from_step=-1) -> dict:
    """Every root attribute of the spec, in its order, with the status "running" of a file being written."""
    world = nodes * gpus_per_node
    return {
        "format": schema.FORMAT, "schema_version": schema.SCHEMA_VERSION, "run_id": run_id, "study": study,
        "start_time_utc": "2025-01-01T00:00:00Z", "status": "running", "attempt": attempt,
        "resumed_from_step": resumed_from_step,
        "git_revision": "0123456789abcdef", "slurm_job_id": "4242", "slurm_array_task_id": "",
        "hosts": ",".join(f"node{i}" for i in range(nodes)), "nodes": nodes, "gpus_per_node": gpus_per_node,
        "world_size": world, "tp": tp, "dp": world // tp, "model_name": "tiny", "parameter_count": 1_234_567,
        "global_batch": global_batch, "micro_batch": micro_batch, "grad_accumulation": grad_accumulation,
        "base_lr": base_lr, "effective_lr": base_lr if effective_lr is None else effective_lr,
        "lr_scaling_rule": lr_scaling_rule, "reference_global_batch": reference_global_batch, "warmup_steps": 0,
        "max_steps": max_steps, "steps_per_epoch": 100, "epochs": 0.0, "precision": "bf16", "optimizer": "adamw",
        "device_names": ",".join(["NVIDIA H100 80GB HBM3"] * world), "driver_version": "550.54",
        "cuda_version": "12.4", "nccl_version": "2.21.5", "torch_version": "2.11.0",
        "peak_flops_per_device": 989e12, "price_per_node_hour_usd": price, "carbon_intensity_g_per_kwh": carbon,
        "pue": pue, "predicted_memory_bytes_per_device": 4 * GIB, "predicted_flops_per_step": 1e12 * global_batch,
        "checkpoint_every_blocks": 0, "attention_kernels": "sdpa: self-attention efficient; cross-attention flash, efficient when padded",
        "energy_source_gpu": energy_source_gpu, "energy_source_cpu": energy_source_cpu,
        "config_yaml": config_yaml(study=study, run_name=run_id, global_batch=global_batch, micro_batch=micro_batch,
                                   max_steps=max_steps, rule=lr_scaling_rule,
                                   reference_global_batch=reference_global_batch, lr=base_lr, price=price,
                                   low_priority_price=low_priority_price, carbon=carbon, pue=pue,
                                   batch_mode=batch_mode),
        "config_changes": "",
    }


class RunWriter:
    """Creates the file as the spec says and keeps it open in SWMR write mode until finish()."""

    def __init__(self, path, attrs: dict):
        self.path = Path(path)
        self.attrs = dict(attrs)
        self.world = int(attrs["world_size"])
        self.rows = {"steps": {}, "eval": {}}  # what was appended, for the summary
        tmp = self.path.with_name(f"{self.path.name}.tmp.{os.getpid()}")
        with h5py.File(tmp, "w", libver=("v110", "latest")) as f:
            for name, value in attrs.items():
                set_attr(f, name, value)
            steps, evals = f.create_group("steps"), f.create_group("eval")
            for name, (dtype, unit) in STEP_COLUMNS.items():
                ds = steps.create_dataset(name, shape=(0,), maxshape=(None,), chunks=(CHUNK_ROWS,), dtype=dtype)
                set_attr(ds, "unit", unit)
            for name, unit in RANK_COLUMNS.items():
                ds = steps.create_dataset(name, shape=(0, self.world), maxshape=(None, self.world),
                                          chunks=(CHUNK_ROWS, self.world), dtype=np.float64)
                set_attr(ds, "unit", unit)
            for name, (dtype, unit) in EVAL_COLUMNS.items():
                ds = evals.create_dataset(name, shape=(0,), maxshape=(None,), chunks=(CHUNK_ROWS,), dtype=dtype)
                set_attr(ds, "unit", unit)
        os.rename(tmp, self.path)
        self.file = h5py.File(self.path, "r+", libver=("v110", "latest"))
        self.file.swmr_mode = True

    def _append(self, group: str, rows: dict) -> None:
        columns = STEP_COLUMNS if group == "steps" else EVAL_COLUMNS
        names = list(columns) + (list(RANK_COLUMNS) if group == "steps" else [])
        count = len(np.asarray(rows["step"]))
        for name in names:
            data = np.asarray(rows[name]) if name in rows else np.full(count, DEFAULT_VALUES[name])
            assert data.shape[0] == count, f"{group}/{name}: {data.shape[0]} rows, expected {count}"
            ds = self.file[group][name]
            start = ds.shape[0]
            ds.resize((start + count,) + ds.shape[1:])
            ds[start:start + count] = data
            self.rows[group].setdefault(name, []).append(data)

    def append_steps(self, rows: dict) -> None:
        self._append("steps", rows)

    def append_eval(self, rows: dict) -> None:
        self._append("eval", rows)

    def flush(self) -> None:
        self.file.flush()

    def column(self, group: str, name: str) -> np.ndarray:
        parts = self.rows[group].get(name)
        return np.concatenate(parts) if parts else np.zeros(0)

    def summary(self, status: str) -> dict:
        """The /summary figures, from what was appended, with the spec's formulas."""
        a = self.attrs
        step_wall, eval_wall = self.column("steps", "wall_time_s"), self.column("eval", "wall_time_s")
        wall_time_s = float(max(step_wall.max(initial=0.0), eval_wall.max(initial=0.0)))

        # the newest row's cumulative counters: GPU joules summed over ranks; CPU joules once per node (each
        # rank of a node reads the node's package counter), summed over nodes; sources "none" count nothing
        gpu_last = self.column("steps", "gpu_energy_j").reshape(-1, self.world)[-1]
        cpu_last = self.column("steps", "cpu_energy_j").reshape(-1, self.world)[-1]
        per_node = self.world // a["nodes"]
        gpu_j = float(gpu_last.sum())
        cpu_j = float(sum(cpu_last[node * per_node] for node in range(a["nodes"])))
        gpu_measured, cpu_measured = a["energy_source_gpu"] != "none", a["energy_source_cpu"] != "none"
        energy_kwh = (((gpu_j if gpu_measured else 0.0) + (cpu_j if cpu_measured else 0.0)) / 3.6e6 * a["pue"]
                      if gpu_measured or cpu_measured else math.nan)
        gpu_kwh = gpu_j / 3.6e6 if gpu_measured else math.nan
        cpu_kwh = cpu_j / 3.6e6 if cpu_measured else math.nan
        memory_peak = self.column("steps", "memory_peak_bytes")
        summary = {
            "end_time_utc": "2025-01-01T01:00:00Z", "status": status, "wall_time_s": wall_time_s,
            "train_time_s": float(self.column("steps", "step_time_s").sum()),
            "eval_time_s": float(self.column("eval", "eval_time_s").sum()),
            "steps_completed": len(self.column("steps", "step")),
            "samples_total": int(self.column("steps", "samples").sum()),
            "tokens_total": int(self.column("steps", "source_tokens").sum() + self.column("steps", "target_tokens").sum()),
            "gpu_energy_kwh": gpu_kwh, "cpu_energy_kwh": cpu_kwh, "energy_kwh": energy_kwh,
            "cost_usd": a["price_per_node_hour_usd"] * a["nodes"] * wall_time_s / 3600.0,
            "co2_kg": energy_kwh * a["carbon_intensity_g_per_kwh"] / 1000.0,
            "mean_step_time_s": float(self.column("steps", "step_time_s").mean()),
            "mean_tokens_per_s": float(self.column("steps", "tokens_per_s").mean()),
            "mean_mfu": float(self.column("steps", "mfu").mean()),
            "peak_memory_bytes": float(memory_peak.max()),
            "mean_memory_allocated_bytes": float(self.column("steps", "memory_allocated_bytes").mean()),
            "total_flops": float(self.column("steps", "model_flops").sum()),
        }
        eval_steps = self.column("eval", "step")
        for m in METRICS:
            values = self.column("eval", m)
            if len(values) and np.isfinite(values).any():
                kept = np.isfinite(values)
                v, s = values[kept], eval_steps[kept]
                best = int(np.argmin(v)) if m == "loss" else int(np.argmax(v))
                summary[f"final_{m}"], summary[f"best_{m}"], summary[f"best_{m}_step"] = float(v[-1]), float(v[best]), int(s[best])
        return summary

    def finish(self, status: str = "completed") -> None:
        summary = self.summary(status)
        self.file.close()
        with h5py.File(self.path, "r+") as f:
            group = f.create_group("summary")
            for name, value in summary.items():
                set_attr(group, name, value)
            set_attr(f, "status", status)


def step_rows(first_step: int, count: int, *, world: int, global_batch: int, step_time_s: float,
              eval_steps=(), eval_time_s: float = 2.0, gpu_power_w: float = 300.0, cpu_power_w=None,
              loss0: float = 4.0, since_step: int = 0) -> dict:
    """Rows first_step..first_step+count-1 of a run with a constant step time, batch and power, written by an
    attempt that started after step `since_step` (0: the run's first start; a run file started by a resume on
    another grid counts its time and energy from its own start). Wall time at step i: (i - since_step) *
    step_time_s plus eval_time_s for each evaluation done before step i (after since_step); cumulative energy at
    step i: power * (i - since_step) * step_time_s (energy is counted during steps only), per GPU for gpu_power_w,
    per node for cpu_power_w (every rank of a node reports its node's counter)."""
    steps = np.arange(first_step, first_step + count, dtype=np.int64)
    evals_before = np.array([sum(1 for e in eval_steps if since_step < e < s) for s in steps], dtype=np.float64)
    ones = np.ones(count)
    per_rank = np.ones((count, world))
    trained_s = ((steps - since_step) * step_time_s)[:, None] * per_rank
    return {
        "step": steps, "epoch": steps / 100.0,
        "wall_time_s": (steps - since_step) * step_time_s + evals_before * eval_time_s,
        "loss": loss0 / np.sqrt(steps), "lr": 1e-3 * ones, "grad_norm": 1.5 * ones, "loss_scale": ones,
        "skipped": np.zeros(count, dtype=np.int8), "samples": global_batch * np.ones(count, dtype=np.int64),
        "source_tokens": 32 * global_batch * np.ones(count, dtype=np.int64),
        "target_tokens": 8 * global_batch * np.ones(count, dtype=np.int64),
        "step_time_s": step_time_s * ones, "data_time_s": 0.1 * step_time_s * ones,
        "forward_time_s": 0.3 * step_time_s * ones, "backward_time_s": 0.5 * step_time_s * ones,
        "optimizer_time_s": 0.1 * step_time_s * ones, "comm_exposed_time_s": np.full(count, np.nan),
        "tokens_per_s": 40 * global_batch / step_time_s * ones, "samples_per_s": global_batch / step_time_s * ones,
        "model_flops": 1e12 * global_batch * ones, "mfu": 0.4 * ones,
        "memory_allocated_bytes": 2 * GIB * per_rank,
        "memory_reserved_bytes": 2.5 * GIB * per_rank,
        "memory_peak_bytes": 3 * GIB * per_rank + np.arange(world)[None, :] * 2 ** 20,
        "host_memory_bytes": 5 * GIB * per_rank,
        "gpu_power_w": gpu_power_w * per_rank,
        "gpu_energy_j": gpu_power_w * trained_s,
        "cpu_energy_j": (cpu_power_w * trained_s) if cpu_power_w is not None else np.full((count, world), np.nan),
    }


def eval_row(step: int, index: int, *, step_time_s: float, eval_time_s: float, rougeL: float, loss: float,
             since_step: int = 0) -> dict:
    """The evaluation after `step`, the index-th of the attempt that started after step `since_step` (0-based):
    it ends at (step - since_step) * step_time_s + (index + 1) * eval_time_s."""
    nan = np.array([np.nan])
    return {
        "step": np.array([step], dtype=np.int64), "epoch": np.array([step / 100.0]),
        "wall_time_s": np.array([(step - since_step) * step_time_s + (index + 1) * eval_time_s]),
        "loss": np.array([loss]),
        "rouge1": np.array([rougeL + 0.1]), "rouge2": np.array([rougeL - 0.1]), "rougeL": np.array([rougeL]),
        "rougeLsum": np.array([rougeL + 0.05]), "exact_match": nan, "f1": nan, "accuracy": nan, "macro_f1": nan,
        "num_examples": np.array([64], dtype=np.int64), "eval_time_s": np.array([eval_time_s]),
    }


def synthetic_run(path, *, n_steps: int, step_time_s: float, evals=(), eval_time_s: float = 2.0,
                  gpu_power_w: float = 300.0, cpu_power_w=None, status="completed", flush_every: int = 10,
                  first_step: int = 1, max_steps=None, **attr_kwargs) -> RunWriter:
    """A whole run: n_steps steps from first_step on, evaluations `evals` = [(step, rougeL, eval loss), ...] after
    those steps, flushed every flush_every steps; finished with `status` (None: left open, still "running").
    With first_step > 1 the file is the one a resume on another grid starts: its time and energy count from its
    own start (pass attempt=1, resumed_from_step=first_step - 1). max_steps: default the last step."""
    attrs = root_attributes(max_steps=first_step - 1 + n_steps if max_steps is None else max_steps, **attr_kwargs)
    writer = RunWriter(path, attrs)
    since = first_step - 1
    eval_steps = [e[0] for e in evals]
    done = 0
    while done < n_steps:
        count = min(flush_every, n_steps - done)
        writer.append_steps(step_rows(first_step + done, count, world=attrs["world_size"],
                                      global_batch=attrs["global_batch"], step_time_s=step_time_s,
                                      eval_steps=eval_steps, eval_time_s=eval_time_s, gpu_power_w=gpu_power_w,
                                      cpu_power_w=cpu_power_w, since_step=since))
        done += count
        for index, (step, rougeL, loss) in enumerate(evals):
            if since + done - count < step <= since + done:
                writer.append_eval(eval_row(step, index, step_time_s=step_time_s, eval_time_s=eval_time_s,
                                            rougeL=rougeL, loss=loss, since_step=since))
        writer.flush()
    if status is not None:
        writer.finish(status)
    return writer
