"""Test fixtures: run files written by t5scale's own writer (RunFile, driven through t5scale_run_file_writer), so
that the rows, the attributes and every /summary figure the analysis reads are those t5scale-train writes.

`synthetic_run` writes a run whose numbers are simple enough to work out by hand (constant step time, power and
batch): the tests compare the analysis with those hand-made values.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import h5py
import numpy as np
import yaml

from t5scale_analyze import schema

# The columns and the caller's attributes as the trainer's writer declares them (t5scale_analyze/run_file_schema.json).
ALL_STEP_COLUMNS = {c["name"] for c in schema.columns("steps")}
RANK_COLUMNS = {c["name"] for c in schema.columns("steps") if c["per_rank"]}  # (rows, world_size)
EVAL_COLUMNS = {c["name"] for c in schema.columns("eval")}
CALLER_ATTRIBUTES = set(schema.root_attribute_names("caller"))
GIB = 1024 ** 3


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
                    energy_source_gpu="nvml_energy_counter", energy_source_cpu="none", predicted_step_time_s=0.5,
                    batch_mode="fixed_micro", node_share=1.0, gpu_price=0.0) -> dict:
    """The caller's root attributes of the spec (the writer adds its own: format, status, attempt, ...)."""
    world = nodes * gpus_per_node
    return {
        "run_id": run_id, "study": study, "git_revision": "0123456789abcdef", "slurm_job_id": "4242", "slurm_array_task_id": "",
        "hosts": ",".join(f"node{i}" for i in range(nodes)), "nodes": nodes, "gpus_per_node": gpus_per_node,
        "world_size": world, "tp": tp, "dp": world // tp, "model_name": "tiny", "parameter_count": 1_234_567,
        "global_batch": global_batch, "micro_batch": micro_batch, "grad_accumulation": grad_accumulation,
        "base_lr": base_lr, "effective_lr": base_lr if effective_lr is None else effective_lr,
        "lr_scaling_rule": lr_scaling_rule, "reference_global_batch": reference_global_batch, "warmup_steps": 0,
        "max_steps": max_steps, "steps_per_epoch": 100, "epochs": 0.0, "precision": "bf16", "optimizer": "adamw",
        "device_names": ",".join(["NVIDIA H100 80GB HBM3"] * world), "driver_version": "550.54",
        "cuda_version": "12.4", "nccl_version": "2.21.5", "torch_version": "2.11.0",
        "peak_flops_per_device": 989e12, "price_per_node_hour_usd": price, "price_per_gpu_hour_usd": gpu_price,
        "node_share_fraction": node_share,
        "node_share_basis": f"{gpus_per_node} of {gpus_per_node / node_share:g} GPUs (held: SLURM_GPUS_ON_NODE; "
                            "the node's: NVML)",
        "allocated_gpus_per_node": gpus_per_node, "carbon_intensity_g_per_kwh": carbon,
        "pue": pue, "predicted_memory_bytes_per_device": 4 * GIB, "predicted_host_memory_bytes_per_rank": 0,
        "predicted_flops_per_step": 1e12 * global_batch,
        "predicted_step_time_s": predicted_step_time_s,
        "checkpoint_every_blocks": 0, "recomputation": "none", "attention_kernels": "sdpa: self-attention efficient; cross-attention flash, efficient when padded",
        "energy_source_gpu": energy_source_gpu, "energy_source_cpu": energy_source_cpu,
        "config_yaml": config_yaml(study=study, run_name=run_id, global_batch=global_batch, micro_batch=micro_batch,
                                   max_steps=max_steps, rule=lr_scaling_rule,
                                   reference_global_batch=reference_global_batch, lr=base_lr, price=price,
                                   low_priority_price=low_priority_price, carbon=carbon, pue=pue,
                                   batch_mode=batch_mode),
        "config_changes": "",
    }


def writer_program() -> str:
    """t5scale_run_file_writer (tests/telemetry/run_file_writer.cpp): $T5SCALE_RUN_FILE_WRITER, else the build
    folder's."""
    given = os.environ.get("T5SCALE_RUN_FILE_WRITER")
    program = Path(given) if given else Path(__file__).resolve().parents[2] / "build/tests/telemetry/t5scale_run_file_writer"
    if not program.is_file():
        raise FileNotFoundError(f"no run-file writer at {program}: build it (cmake --build build --target "
                                f"t5scale_run_file_writer) or name it in T5SCALE_RUN_FILE_WRITER")
    return str(program)


def _json_value(value):
    """A value as the writer reads it: NaN as null, numpy scalars and arrays as numbers and lists."""
    if isinstance(value, np.ndarray):
        return [_json_value(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, (np.integer, bool, np.bool_)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    return value


class RunWriter:
    """A run file written by t5scale's own writer (RunFile, through t5scale_run_file_writer): created with the
    caller's attributes (the run file's own ones in `attrs` are left to the writer), then rows, flushes and the end.
    Every figure of /summary is the writer's."""

    def __init__(self, path, attrs: dict, *, resume_through_step=None):
        self.path = Path(path)
        self.attrs = dict(attrs)
        self.world = int(attrs["world_size"])
        self.warning = ""
        self.process = subprocess.Popen([writer_program()], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        described = {k: _json_value(v) for k, v in attrs.items() if k in CALLER_ATTRIBUTES}
        if resume_through_step is None:
            self._send({"op": "create", "path": str(self.path), "attributes": described})
        else:
            answer = self._send({"op": "resume", "path": str(self.path), "attributes": described,
                                 "keep_through_step": int(resume_through_step)})
            self.warning = answer[3:]

    def _send(self, line: dict) -> str:
        assert self.process is not None, "the file was finished or closed"
        self.process.stdin.write(json.dumps(line, allow_nan=False) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().strip()
        if not answer.startswith("ok"):
            self.process.wait(timeout=60)
            raise RuntimeError(f"run-file writer, {line['op']} on {self.path}: {answer or 'no answer'}")
        return answer

    def _end(self, line: dict) -> None:
        self._send(line)
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.process = None

    def _rows(self, group: str, rows: dict) -> list:
        columns = ALL_STEP_COLUMNS if group == "steps" else EVAL_COLUMNS
        unknown = set(rows) - set(columns)
        assert not unknown, f"{group}: no columns {sorted(unknown)}"
        count = len(np.asarray(rows["step"]))
        out = [{} for _ in range(count)]
        for name, values in rows.items():
            values = np.asarray(values)
            assert values.shape[0] == count, f"{group}/{name}: {values.shape[0]} rows, expected {count}"
            for i in range(count):
                out[i][name] = _json_value(values[i])
        if group == "steps":  # per-rank columns left out are not measured: NaN on every rank
            for name in RANK_COLUMNS - set(rows):
                for row in out:
                    row[name] = [None] * self.world
        return out

    def append_steps(self, rows: dict) -> None:
        self._send({"op": "steps", "rows": self._rows("steps", rows)})

    def append_eval(self, rows: dict) -> None:
        self._send({"op": "eval", "rows": self._rows("eval", rows)})

    def flush(self) -> None:
        self._send({"op": "flush"})

    def finish(self, status: str = "completed", **inputs) -> None:
        """The end of the run: the final /summary (with `inputs`: wall_time_s, gpu_energy_j, ...) and status."""
        self._end({"op": "finish", "status": status, "inputs": {k: _json_value(v) for k, v in inputs.items()}})

    def fail(self, error: str, step: int) -> None:
        """A job going down with an error (record_failure)."""
        self._end({"op": "fail", "error": error, "step": int(step)})

    def close(self) -> None:
        """Ends the writer without finishing the file: a job that ended with the file "running"."""
        self._end({"op": "close"})

    def kill(self) -> None:
        """SIGKILLs the writer: what it flushed stays, what it buffered is lost."""
        self.process.kill()
        self.process.wait(timeout=60)
        self.process = None


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
                  first_step: int = 1, max_steps=None, since_step=None, **attr_kwargs) -> RunWriter:
    """A whole run: n_steps steps from first_step on, evaluations `evals` = [(step, rougeL, eval loss), ...] after
    those steps, flushed every flush_every steps; finished with `status` (None: left open, still "running").
    With first_step > 1 the writer resumes the file at `path` from the checkpoint of step first_step - 1, as a
    resumed job does (on another grid, the old file is set aside and this one counts its rows' time and energy
    from its own start; since_step, default first_step - 1, is the step after which this file's clock started: a
    resume on the same grid goes on with the file's clock). max_steps: default the last step."""
    attrs = root_attributes(max_steps=first_step - 1 + n_steps if max_steps is None else max_steps, **attr_kwargs)
    writer = RunWriter(path, attrs, resume_through_step=first_step - 1 if first_step > 1 else None)
    since = first_step - 1 if since_step is None else since_step
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
