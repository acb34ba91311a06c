"""The run file's schema 1 (the columns from the schema file the writer's tables generate) and the probe's row
formulas, written independently of the C++ writer: the h5py checks in this folder compare what t5scale wrote
against these."""

import json
import math
import os

import numpy as np

WORLD = 4
NODES = 2

# The schema as the writer declares it (analysis/t5scale_analyze/run_file_schema.json, which the unit test
# unit.telemetry_run_file_schema keeps equal to the writer's tables): the checks below hold the files the writer
# really wrote to it, dataset by dataset.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "analysis", "t5scale_analyze",
                       "run_file_schema.json"), encoding="utf-8") as _schema_file:
    SCHEMA = json.load(_schema_file)
_DTYPES = {"int64": np.int64, "int8": np.int8, "float64": np.float64}
# (name, numpy dtype, unit, per_rank) in the writer's order.
STEP_COLUMNS = [(c["name"], _DTYPES[c["dtype"]], c["unit"], c["per_rank"]) for c in SCHEMA["steps"]]
EVAL_COLUMNS = [(c["name"], _DTYPES[c["dtype"]], c["unit"], c["per_rank"]) for c in SCHEMA["eval"]]

EVAL_METRICS = ["loss", "rouge1", "rouge2", "rougeL", "rougeLsum", "exact_match", "f1", "accuracy", "macro_f1"]

# The probe's root attributes (t5scale_run_file_probe.cpp gives the same values).
def probe_attributes(max_steps):
    return {
        "format": SCHEMA["format"],
        "schema_version": SCHEMA["schema_version"],
        "run_id": "probe-run",
        "study": "telemetry",
        "git_revision": "0123abc",
        "slurm_job_id": "",
        "slurm_array_task_id": "",
        "hosts": "node-a,node-b",
        "nodes": 2,
        "gpus_per_node": 2,
        "world_size": WORLD,
        "tp": 2,
        "dp": 2,
        "model_name": "t5-small",
        "parameter_count": 60506624,
        "global_batch": 16,
        "micro_batch": 8,
        "grad_accumulation": 1,
        "base_lr": 3e-4,
        "effective_lr": 6e-4,
        "lr_scaling_rule": "linear",
        "reference_global_batch": 8,
        "warmup_steps": 5,
        "max_steps": max_steps,
        "steps_per_epoch": 8,
        "epochs": 0.0,
        "precision": "bf16",
        "optimizer": "adamw",
        "device_names": ",".join(["NVIDIA H100 80GB HBM3"] * 4),
        "driver_version": "550.54.15",
        "cuda_version": "12.4",
        "nccl_version": "2.27.3",
        "torch_version": "2.11.0",
        "peak_flops_per_device": 989.4e12,
        "price_per_node_hour_usd": 12.5,
        "price_per_gpu_hour_usd": 0.0,
        "node_share_fraction": 0.5,
        "node_share_basis": "2 of 4 GPUs (held: SLURM_GPUS_ON_NODE; the node's: NVML)",
        "allocated_gpus_per_node": 2,
        "carbon_intensity_g_per_kwh": 475.0,
        "pue": 1.25,
        "predicted_memory_bytes_per_device": 12345678901,
        "predicted_host_memory_bytes_per_rank": 112097060864,
        "predicted_flops_per_step": 1.5e12,
        "predicted_step_time_s": 0.25,
        "checkpoint_every_blocks": 2,
        "recomputation": "every 2nd block",
        "attention_kernels": "explicit",
        "energy_source_gpu": "nvml_energy_counter",
        "energy_source_cpu": "rapl",
        "config_yaml": "run: {name: probé, study: telemetry}\ntrain: {max_steps: 23}\n",
        "config_changes": "step 10: train.max_steps: 20 -> 23",
    }


# The spec's root attributes that are numbers; every other one is a string.
INT_ATTRIBUTES = {"schema_version", "attempt", "resumed_from_step", "error_step", "nodes", "gpus_per_node", "world_size", "tp",
                  "dp", "parameter_count", "global_batch", "micro_batch", "grad_accumulation",
                  "reference_global_batch", "warmup_steps", "max_steps", "steps_per_epoch",
                  "predicted_memory_bytes_per_device", "predicted_host_memory_bytes_per_rank", "checkpoint_every_blocks",
                  "allocated_gpus_per_node"}
FLOAT_ATTRIBUTES = {"epochs", "base_lr", "effective_lr", "peak_flops_per_device", "price_per_node_hour_usd",
                    "price_per_gpu_hour_usd", "node_share_fraction", "carbon_intensity_g_per_kwh", "pue",
                    "predicted_flops_per_step", "predicted_step_time_s"}
ROOT_ATTRIBUTES = ["format", "schema_version", "run_id", "study", "start_time_utc", "status", "attempt",
                   "resumed_from_step", "error", "error_step", "git_revision", "slurm_job_id", "slurm_array_task_id", "hosts", "nodes",
                   "gpus_per_node", "world_size", "tp", "dp", "model_name", "parameter_count", "global_batch",
                   "micro_batch", "grad_accumulation", "base_lr", "effective_lr", "lr_scaling_rule",
                   "reference_global_batch", "warmup_steps", "max_steps", "steps_per_epoch", "epochs", "precision",
                   "optimizer", "device_names", "driver_version", "cuda_version", "nccl_version", "torch_version",
                   "peak_flops_per_device", "price_per_node_hour_usd", "price_per_gpu_hour_usd",
                   "node_share_fraction", "node_share_basis", "allocated_gpus_per_node", "carbon_intensity_g_per_kwh",
                   "pue",
                   "predicted_memory_bytes_per_device", "predicted_host_memory_bytes_per_rank",
                   "predicted_flops_per_step", "predicted_step_time_s", "checkpoint_every_blocks",
                   "recomputation", "attention_kernels", "energy_source_gpu", "energy_source_cpu", "config_yaml",
                   "config_changes"]


def step_row(s):
    """Column name -> value (a list per rank for per-rank columns) of the probe's step s."""
    x = float(s)
    row = {
        "step": s, "epoch": x / 8.0, "wall_time_s": 0.5 * x, "loss": 4.0 - x / 16.0, "lr": 1e-3 * x / 32.0,
        "grad_norm": 1.0 + x / 4.0, "loss_scale": 65536.0 if s % 2 == 1 else 32768.0,
        "skipped": 1 if s % 7 == 0 else 0, "samples": 16, "source_tokens": 1000 + s, "target_tokens": 200 + s,
        "step_time_s": 0.25, "data_time_s": 0.03125, "forward_time_s": 0.0625, "backward_time_s": 0.09375,
        "optimizer_time_s": 0.03125, "comm_exposed_time_s": 0.0078125, "tokens_per_s": float(1200 + 2 * s) / 0.25,
        "samples_per_s": 64.0, "model_flops": 1.5e12, "mfu": 0.375,
    }
    ranks = [float(k) for k in range(WORLD)]
    row["memory_allocated_bytes"] = [1e9 + k * 1e6 + x * 1024.0 for k in ranks]
    row["memory_reserved_bytes"] = [2e9 + k * 1e6 for k in ranks]
    row["memory_peak_bytes"] = [1.5e9 + k * 1e6 + x * 4096.0 for k in ranks]
    row["host_memory_bytes"] = [3e9 + k for k in ranks]
    row["gpu_power_w"] = [300.0 + k + x / 4.0 for k in ranks]
    row["gpu_energy_j"] = [100.0 * x + k for k in ranks]
    row["cpu_energy_j"] = [math.nan if k == 2 else 50.0 * x + k / 2.0 for k in ranks]
    return row


def eval_row(e, last):
    x = float(e)
    nan = math.nan
    return {
        "step": e, "epoch": x / 8.0, "wall_time_s": 0.5 * x + 0.25, "loss": 3.0 - x / 64.0,
        "rouge1": 0.5 - abs(x - 10.0) / 256.0, "rouge2": 0.125 + x / 512.0, "rougeL": 0.1875 + x / 256.0,
        "rougeLsum": 0.1875 + x / 128.0, "exact_match": nan, "f1": 0.75 if last else nan, "accuracy": nan,
        "macro_f1": nan, "num_examples": 100, "eval_time_s": 2.5, "generated_ids_beyond_vocab": e % 3,
    }


def text(value):
    """h5py gives fixed-length strings as bytes."""
    return value.decode("utf-8") if isinstance(value, (bytes, np.bytes_)) else value


def same(a, b):
    """Exact equality of floats with NaN equal to NaN (values are written and read bit for bit)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def fail(message):
    raise AssertionError(message)


def check_layout(f):
    """Every dataset of the spec with its dtype, shape, unit attribute and chunking; equal lengths per group.
    Returns the row counts (steps, eval)."""
    rows = {}
    for group, columns in (("steps", STEP_COLUMNS), ("eval", EVAL_COLUMNS)):
        if sorted(f[group].keys()) != sorted(c[0] for c in columns):
            fail(f"/{group} holds {sorted(f[group].keys())}, the spec's columns are {[c[0] for c in columns]}")
        lengths = set()
        for name, dtype, unit, per_rank in columns:
            d = f[group][name]
            if d.dtype != np.dtype(dtype):
                fail(f"/{group}/{name} has dtype {d.dtype}, expected {np.dtype(dtype)}")
            if per_rank and (d.ndim != 2 or d.shape[1] != WORLD):
                fail(f"/{group}/{name} has shape {d.shape}, expected (rows, {WORLD})")
            if not per_rank and d.ndim != 1:
                fail(f"/{group}/{name} has shape {d.shape}, expected (rows,)")
            if d.maxshape[0] is not None:
                fail(f"/{group}/{name} is not extendible: maxshape {d.maxshape}")
            if d.chunks is None or d.chunks[0] != 256:
                fail(f"/{group}/{name} chunks {d.chunks}, expected 256 rows")
            # What a reader sees in a row a kill left unwritten.
            if np.issubdtype(np.dtype(dtype), np.integer) and d.fillvalue != -1:
                fail(f"/{group}/{name} fill value {d.fillvalue}, expected -1")
            if not np.issubdtype(np.dtype(dtype), np.integer) and not np.isnan(d.fillvalue):
                fail(f"/{group}/{name} fill value {d.fillvalue}, expected NaN")
            if text(d.attrs.get("unit")) != unit:
                fail(f"/{group}/{name} unit {d.attrs.get('unit')!r}, expected {unit!r}")
            lengths.add(d.shape[0])
        rows[group] = lengths
    return rows


def check_rows(f, group, columns, expected_rows, count=None):
    """The first `count` rows of /group equal `expected_rows` (dicts of column -> value), column by column."""
    count = len(expected_rows) if count is None else count
    for name, dtype, unit, per_rank in columns:
        got = f[group][name][:count]
        want = [row[name] for row in expected_rows[:count]]
        if np.issubdtype(np.dtype(dtype), np.integer):
            if got.tolist() != want:
                fail(f"/{group}/{name}[:{count}] = {got.tolist()}, expected {want}")
        elif not same(got, want):
            bad = [i for i in range(count) if not same(got[i], want[i])]
            fail(f"/{group}/{name}: rows {bad[:5]} differ, e.g. row {bad[0]}: {got[bad[0]]} != {want[bad[0]]}")


def check_root_attributes(f, expected):
    names = set(f.attrs.keys())
    if names != set(ROOT_ATTRIBUTES):
        fail(f"root attributes: missing {sorted(set(ROOT_ATTRIBUTES) - names)}, extra {sorted(names - set(ROOT_ATTRIBUTES))}")
    for name in ROOT_ATTRIBUTES:
        value = f.attrs[name]
        if name in INT_ATTRIBUTES:
            if not (isinstance(value, np.integer) and value.dtype == np.int64):
                fail(f"root attribute {name} = {value!r} is not an int64")
        elif name in FLOAT_ATTRIBUTES:
            if not (isinstance(value, np.floating) and value.dtype == np.float64):
                fail(f"root attribute {name} = {value!r} is not a float64")
        elif not isinstance(value, (bytes, np.bytes_)):
            fail(f"root attribute {name} = {value!r} is not a fixed-length string")
        if name in expected and (text(value) if isinstance(value, (bytes, np.bytes_)) else value) != expected[name]:
            fail(f"root attribute {name} = {value!r}, expected {expected[name]!r}")
