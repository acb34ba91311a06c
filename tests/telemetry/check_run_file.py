"""A whole run file, written by t5scale_run_file_probe and finished, read back with h5py: every dataset, dtype,
length and unit, every root attribute, every value written, and the /summary figures recomputed here from the
spec's formulas. Then the end of a run while a reader holds its file as h5py does (with HDF5's file lock, as
`t5scale-study status` or a notebook would): the writer waits for a reader that lets go, goes on without the lock
past its wait, and writes its summary either way.

usage: python check_run_file.py <t5scale_run_file_probe> <work folder>
"""

import math
import os
import subprocess
import sys

import h5py
import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_file_schema import (EVAL_COLUMNS, EVAL_METRICS, NODES, SCHEMA, STEP_COLUMNS, WORLD, check_layout,  # noqa: E402
                             check_root_attributes, check_rows, eval_row, fail, probe_attributes, step_row, text)

STEPS = 23
EVAL_EVERY = 10


def close(a, b):
    # Sums and means over rows are added in another order here than in C++: equal to rounding (1e-12 relative).
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


def expected_summary(steps, evals, wall_time_s):
    attrs = probe_attributes(STEPS)
    last = steps[-1]
    gpu_j = sum(last["gpu_energy_j"])
    per_node = WORLD // NODES
    cpu_j = 0.0
    for node in range(NODES):
        values = [v for v in last["cpu_energy_j"][node * per_node:(node + 1) * per_node] if not math.isnan(v)]
        cpu_j += values[0]  # the lowest rank of the node that measured it
    energy_kwh = (gpu_j + cpu_j) / 3.6e6 * attrs["pue"]
    n = len(steps)
    summary = {
        "status": "completed",
        "wall_time_s": wall_time_s,
        "train_time_s": sum(r["step_time_s"] for r in steps),
        "eval_time_s": sum(r["eval_time_s"] for r in evals),
        "steps_completed": n,
        "samples_total": sum(r["samples"] for r in steps),
        "tokens_total": sum(r["source_tokens"] + r["target_tokens"] for r in steps),
        "gpu_energy_kwh": gpu_j / 3.6e6,
        "cpu_energy_kwh": cpu_j / 3.6e6,
        "energy_kwh": energy_kwh,
        "cost_usd": (attrs["price_per_node_hour_usd"] * attrs["nodes"] * attrs["node_share_fraction"] * wall_time_s
                     / 3600),
        "co2_kg": energy_kwh * attrs["carbon_intensity_g_per_kwh"] / 1000,
        # Both sources measured: no estimate (it is only made where nothing was measured).
        "estimated_energy_kwh": math.nan,
        "estimated_co2_kg": math.nan,
        "energy_estimate_method": "",
        "mean_step_time_s": sum(r["step_time_s"] for r in steps) / n,
        "mean_tokens_per_s": sum(r["tokens_per_s"] for r in steps) / n,
        "mean_mfu": sum(r["mfu"] for r in steps) / n,
        "peak_memory_bytes": max(max(r["memory_peak_bytes"]) for r in steps),
        "mean_memory_allocated_bytes": sum(sum(r["memory_allocated_bytes"]) for r in steps) / (n * WORLD),
        "peak_host_memory_bytes": max(max(r["host_memory_bytes"]) for r in steps),
        "total_flops": sum(r["model_flops"] for r in steps),
    }
    for m in EVAL_METRICS:
        computed = [(r[m], r["step"]) for r in evals if not math.isnan(r[m])]
        if not computed:  # never computed: unknown, at no step
            summary[f"final_{m}"], summary[f"best_{m}"], summary[f"best_{m}_step"] = math.nan, math.nan, -1
            continue
        best = min(v for v, _ in computed) if m == "loss" else max(v for v, _ in computed)
        summary[f"final_{m}"] = computed[-1][0]
        summary[f"best_{m}"] = best
        summary[f"best_{m}_step"] = next(s for v, s in computed if v == best)
    return summary


def main():
    probe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "finished.h5")
    subprocess.run([probe, "write", path, str(STEPS), str(EVAL_EVERY), "5"], check=True)
    leftovers = [n for n in os.listdir(work) if ".tmp." in n]
    if leftovers:
        fail(f"temporary files left behind: {leftovers}")

    steps = [step_row(s) for s in range(1, STEPS + 1)]
    eval_steps = [e for e in range(1, STEPS + 1) if e % EVAL_EVERY == 0 or e == STEPS]
    evals = [eval_row(e, e == STEPS) for e in eval_steps]

    # A finished file opens without SWMR.
    with h5py.File(path, "r") as f:
        lengths = check_layout(f)
        if lengths != {"steps": {STEPS}, "eval": {len(evals)}}:
            fail(f"row counts {lengths}, expected {STEPS} steps and {len(evals)} evals in every column")
        check_rows(f, "steps", STEP_COLUMNS, steps)
        check_rows(f, "eval", EVAL_COLUMNS, evals)

        expected = probe_attributes(STEPS)
        expected.update({"status": "completed", "attempt": 0, "resumed_from_step": -1, "error": "", "error_step": -1})
        check_root_attributes(f, expected)
        start = text(f.attrs["start_time_utc"])
        if len(start) != 20 or start[10] != "T" or not start.endswith("Z"):
            fail(f"start_time_utc {start!r} is not ISO 8601 UTC to the second")

        summary = f["summary"].attrs
        want = expected_summary(steps, evals, 0.5 * STEPS + 1.0)
        got_names = set(summary.keys())
        want_names = set(want) | {"end_time_utc"}
        if got_names != want_names:
            fail(f"/summary attributes: missing {sorted(want_names - got_names)}, extra {sorted(got_names - want_names)}")
        declared = [figure["name"] for figure in SCHEMA["summary"]]
        if sorted(declared) != sorted(want_names):
            fail(f"the schema's /summary figures {declared} are not the file's {sorted(want_names)}")
        end = text(summary["end_time_utc"])
        if not (len(end) == 20 and end >= start):
            fail(f"end_time_utc {end!r} is not an ISO time at or after start_time_utc {start!r}")
        for name, value in want.items():
            got = summary[name]
            if isinstance(value, str):
                ok = text(got) == value
            elif isinstance(value, int):
                ok = isinstance(got, np.integer) and got.dtype == np.int64 and int(got) == value
            else:
                ok = isinstance(got, np.floating) and close(float(got), value)
            if not ok:
                fail(f"/summary {name} = {got!r}, expected {value!r}")
    print(f"run file ok: {STEPS} steps, {len(evals)} evaluations, {len(want)} summary figures")
    check_finish_beside_a_reader(probe, work)


def check_finish_beside_a_reader(probe, work):
    # (how long the reader holds the file at most, how long the writer waits for readers)
    for hold_s, wait_s in ((1.0, 30.0), (30.0, 0.5)):
        path = os.path.join(work, f"held_{hold_s:g}s_wait_{wait_s:g}s.h5")
        writer = subprocess.Popen([probe, "finish-on-cue", path, "6", str(wait_s)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        if writer.stdout.readline().strip() != "flushed":
            fail("the probe did not flush its steps")
        reader = h5py.File(path, "r", swmr=True)  # HDF5's default: a shared lock on the file while it is open
        writer.stdin.write("finish\n")
        writer.stdin.flush()
        try:
            writer.wait(timeout=min(hold_s, wait_s + 5.0))
            ended_while_held = True
        except subprocess.TimeoutExpired:
            ended_while_held = False
        reader.close()
        out, _ = writer.communicate(timeout=60)
        if writer.returncode != 0:
            fail(f"the writer failed to finish beside a reader (held up to {hold_s} s, wait {wait_s} s)")
        took_s = float(out.split()[-1])
        if hold_s < wait_s and (ended_while_held or took_s < 0.8 * hold_s):
            fail(f"the writer finished in {took_s} s beside a reader that held the file {hold_s} s: it did not wait "
                 "for the reader to let go")
        if hold_s > wait_s and not ended_while_held:
            fail(f"the writer was still finishing {wait_s + 5.0} s after its cue, {wait_s} s being its wait for readers")
        with h5py.File(path, "r") as f:
            if text(f.attrs["status"]) != "completed" or int(f["summary"].attrs["steps_completed"]) != 6:
                fail(f"{path}: no summary after a finish beside a reader")
        print(f"finish beside a reader (held up to {hold_s:g} s, writer's wait {wait_s:g} s): {took_s:.2f} s")


if __name__ == "__main__":
    main()
