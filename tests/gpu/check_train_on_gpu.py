#!/usr/bin/env python3
"""t5scale-train on one GPU (bf16, NCCL backend, the synthetic task) and its run file read back with h5py: the job
completed on a CUDA device, and every step has MFU, GPU energy and CUDA memory filled in with plausible values.

usage: check_train_on_gpu.py --bin DIR --work DIR [--model NAME] [--steps N] [--global-batch B]
                             [--grad-accumulation N] [--json FILE]

Exits 0 when every check passes, 1 when the run or a check fails, and 77 (ctest's skip code) when h5py cannot be
imported: the run file is then left in --work, unchecked, and the message says so. With --grad-accumulation N the
global batch is N micro-batches (the run file's grad_accumulation must say N): the fp32 accumulation of bf16
gradients then runs as well. --json writes the run's
figures (model, steps, step time, tokens/s, MFU, peak memory, energy, power) for scripts/gpu-check.sh's summary.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

SKIPPED = 77


def fail(message):
    print(f"FAILED: {message}")
    sys.exit(1)


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def run_training(args):
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    settings = {
        "model.name": args.model,
        "precision": "bf16",
        "parallel.backend": "nccl",
        "train.max_steps": args.steps,
        "train.global_batch": args.global_batch,
        "train.grad_accumulation": args.grad_accumulation,
        "train.log_every": max(1, args.steps // 5),
        "data.synthetic_examples": max(1024, 4 * args.global_batch * args.steps),
        "eval.at_end": "false",
        "checkpoint.at_end": "false",
        "checkpoint.resume": "never",
        "run.name": "gpu_train",
        "run.output_dir": args.work,
    }
    command = [os.path.join(args.bin, "t5scale-train")]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    print("$ " + " ".join(command), flush=True)
    start = time.monotonic()
    with open(os.path.join(args.work, "train.log"), "w") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout_s).returncode
    with open(os.path.join(args.work, "train.log")) as log:
        lines = log.read().splitlines()
    print("\n".join(lines[-25:]))
    if code != 0:
        fail(f"t5scale-train exited {code} (log: {os.path.join(args.work, 'train.log')})")
    return os.path.join(args.work, "gpu_train.h5"), time.monotonic() - start


def check_run_file(path, args):
    import h5py  # noqa: F401 (checked by the caller)
    import numpy as np

    with h5py.File(path, "r") as f:
        attrs = {k: (text(v) if isinstance(v, (bytes, str)) else v) for k, v in f.attrs.items()}
        if int(attrs.get("grad_accumulation", -1)) != args.grad_accumulation:
            fail(f"grad_accumulation {attrs.get('grad_accumulation')!r} in the run file, expected {args.grad_accumulation}")
        if attrs.get("status") != "completed":
            fail(f"run file status {attrs.get('status')!r}, expected 'completed'")
        device = attrs.get("device_names", "")
        if not device or device == "cpu":
            fail(f"device_names {device!r}: the job did not run on a CUDA device")
        expected_kernels = "sdpa: self-attention efficient; cross-attention flash, efficient when padded"
        if text(attrs.get("attention_kernels", "")) != expected_kernels:
            fail(f"attention_kernels {attrs.get('attention_kernels')!r}, expected {expected_kernels!r} for bf16")
        if not text(attrs.get("energy_source_gpu", "")).startswith("nvml"):
            fail(f"energy_source_gpu {attrs.get('energy_source_gpu')!r}: NVML did not meter the GPU")
        if not attrs.get("peak_flops_per_device", 0) > 0:
            fail(f"peak_flops_per_device {attrs.get('peak_flops_per_device')!r}: no peak known for {device}, so no MFU")
        steps = f["steps"]
        n = min(len(steps[name]) for name in steps)
        if n != args.steps:
            fail(f"{n} step rows, expected {args.steps}")
        column = {name: np.asarray(steps[name][:n], dtype=np.float64) for name in
                  ["mfu", "step_time_s", "tokens_per_s", "memory_peak_bytes", "memory_allocated_bytes",
                   "gpu_energy_j", "gpu_power_w"]}
        summary = {k: v for k, v in f["summary"].attrs.items()} if "summary" in f else {}

    mfu = column["mfu"]
    if not (np.all(np.isfinite(mfu)) and np.all(mfu > 0) and np.all(mfu < 1)):
        fail(f"mfu must lie in (0, 1) on every step, got {mfu.tolist()}")
    peak, allocated = column["memory_peak_bytes"].reshape(n, -1), column["memory_allocated_bytes"].reshape(n, -1)
    if not (np.all(peak > 0) and np.all(peak >= allocated)):
        fail(f"memory_peak_bytes must be > 0 and >= memory_allocated_bytes: {peak.ravel().tolist()}")
    energy = column["gpu_energy_j"].reshape(n, -1)[:, 0]
    if not np.all(np.isfinite(energy)):
        fail(f"gpu_energy_j has steps without a value: {energy.tolist()}")
    if np.any(np.diff(energy) < 0) or not energy[-1] > energy[0]:
        fail(f"gpu_energy_j must grow over the run: {energy.tolist()}")
    for name in ["mean_mfu", "gpu_energy_kwh", "peak_memory_bytes"]:
        if not summary.get(name, 0) > 0:
            fail(f"/summary {name} = {summary.get(name)!r}, expected > 0")

    train_s = float(np.sum(column["step_time_s"]))
    return {
        "model": args.model,
        "device": device,
        "steps": n,
        "global_batch": args.global_batch,
        "grad_accumulation": args.grad_accumulation,
        "mean_step_time_s": train_s / n,
        "mean_tokens_per_s": float(np.mean(column["tokens_per_s"])),
        "mean_mfu": float(np.mean(mfu)),
        "peak_memory_bytes": float(np.max(peak)),
        "gpu_energy_j": float(energy[-1] - energy[0]),
        "mean_gpu_power_w": float(np.nanmean(column["gpu_power_w"])),
        "summary_energy_kwh": float(summary.get("energy_kwh", float("nan"))),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True, help="the folder of t5scale-train")
    parser.add_argument("--work", required=True, help="a folder for the run (emptied first)")
    parser.add_argument("--model", default="t5-small")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--global-batch", type=int, default=32)
    parser.add_argument("--grad-accumulation", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--timeout-s", type=float, default=240.0)
    parser.add_argument("--json", help="write the run's figures here")
    args = parser.parse_args()

    path, wall_s = run_training(args)
    try:
        import h5py  # noqa: F401
    except ImportError as e:
        print(f"skipped: the run completed, but {sys.executable} cannot import h5py ({e}), so its run file {path} "
              f"was not checked; install h5py (pip install h5py) or check it elsewhere")
        sys.exit(SKIPPED)
    figures = check_run_file(path, args)
    figures["wall_time_s"] = wall_s
    figures["run_file"] = path
    if args.json:
        with open(args.json + ".tmp", "w") as out:
            json.dump(figures, out, indent=2)
        os.replace(args.json + ".tmp", args.json)
    print("run file ok: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) and math.isfinite(v) else f"{k} {v}"
                                      for k, v in figures.items()))


if __name__ == "__main__":
    main()
