"""The run file survives SIGKILL: t5scale_run_file_probe appends rows (a flush every 5) and is killed mid-run.
h5py then opens the file with swmr=True, without h5clear, and finds every row the probe reported flushed, with
the values written. A resume keeping the steps <= k makes attempt 1, and the finished file opens without SWMR.
A reader also opens the file while the writer is still running.

usage: python check_sigkill.py <t5scale_run_file_probe> <work folder>
"""

import math
import os
import random
import re
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_file_schema import (EVAL_COLUMNS, STEP_COLUMNS, WORLD, check_layout, check_root_attributes,  # noqa: E402
                             check_rows, eval_row, fail, probe_attributes, same, step_row, text)

FLUSH_EVERY = 5
MAX_STEPS = 100000
KILL_AFTER_STEPS = 60
FLUSHED = re.compile(r"flushed steps=(\d+) evals=(\d+)")


def shortest(f, group):
    return min(d.shape[0] for d in f[group].values())


def check_flushed(path, steps_reported, evals_reported):
    """Every reported row is there with its values. Rows after them are from a flush the kill interrupted: each
    value is the one written or the fill value (NaN, -1)."""
    with h5py.File(path, "r", swmr=True) as f:
        check_layout(f)
        n_steps, n_evals = shortest(f, "steps"), shortest(f, "eval")
        if n_steps < steps_reported or n_evals < evals_reported:
            fail(f"{n_steps} steps and {n_evals} evals readable, {steps_reported} and {evals_reported} were flushed")
        check_rows(f, "steps", STEP_COLUMNS, [step_row(s) for s in range(1, steps_reported + 1)])
        check_rows(f, "eval", EVAL_COLUMNS, [eval_row(10 * i, False) for i in range(1, evals_reported + 1)])
        for i in range(steps_reported, n_steps):
            want = step_row(i + 1)
            for name, dtype, _, _ in STEP_COLUMNS:
                got = f["steps"][name][i]
                fill = -1 if np.issubdtype(np.dtype(dtype), np.integer) else math.nan
                if not (same(got, want[name]) or same(got, np.full_like(np.asarray(got, dtype=float), fill))):
                    fail(f"/steps/{name}[{i}] = {got}: neither the value written nor the fill value")
        attrs = probe_attributes(MAX_STEPS)
        attrs.update({"status": "running", "attempt": 0, "resumed_from_step": -1, "error": "", "error_step": -1})
        check_root_attributes(f, attrs)
        # /summary holds the figures of a flush: the one reported, or a later one the kill interrupted after it
        # rewrote the figures.
        summary = f["summary"].attrs
        counted = int(summary["steps_completed"])
        if text(summary["status"]) != "running" or not steps_reported <= counted <= n_steps:
            fail(f"/summary: status {text(summary['status'])!r}, {counted} steps; expected running and "
                 f"{steps_reported} to {n_steps} steps")
        train_time_s = sum(step_row(s)["step_time_s"] for s in range(1, counted + 1))
        if not math.isclose(float(summary["train_time_s"]), train_time_s, rel_tol=1e-12):
            fail(f"/summary train_time_s {float(summary['train_time_s'])} after {counted} steps, expected {train_time_s}")
        return n_steps, text(f.attrs["start_time_utc"])


def main():
    probe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "killed.h5")
    for name in os.listdir(work):
        os.remove(os.path.join(work, name))

    writer = subprocess.Popen([probe, "run", path, str(MAX_STEPS), str(FLUSH_EVERY), "2"], stdout=subprocess.PIPE,
                              text=True)
    steps_reported = evals_reported = 0
    read_while_running = False
    for line in writer.stdout:
        match = FLUSHED.fullmatch(line.strip())
        if not match:
            fail(f"unexpected probe output {line!r}")
        steps_reported, evals_reported = int(match[1]), int(match[2])
        if not read_while_running and steps_reported >= 20:
            # A SWMR reader beside the live writer.
            with h5py.File(path, "r", swmr=True) as f:
                if shortest(f, "steps") < steps_reported:
                    fail(f"live reader sees {shortest(f, 'steps')} rows, {steps_reported} were flushed")
                if text(f.attrs["status"]) != "running":
                    fail("a live run's status is not 'running'")
            read_while_running = True
        if steps_reported >= KILL_AFTER_STEPS:
            break
    # Kill at a random moment between flushes (or inside one).
    time.sleep(random.uniform(0.0, 0.03))
    writer.send_signal(signal.SIGKILL)
    rest = writer.stdout.read()
    writer.wait()
    if writer.returncode != -signal.SIGKILL:
        fail(f"the probe ended with {writer.returncode}, not by SIGKILL")
    for line in rest.splitlines():  # flushes reported after the loop stopped reading
        match = FLUSHED.fullmatch(line.strip())
        if match:
            steps_reported, evals_reported = int(match[1]), int(match[2])
    if not read_while_running:
        fail("the live read never happened")

    n_steps, start_time = check_flushed(path, steps_reported, evals_reported)
    print(f"killed after {steps_reported} flushed steps ({n_steps} readable), {evals_reported} evals: all there")

    # Resume from the checkpoint of step k: rows <= k kept, attempt 1, the offsets are the newest old row's.
    keep = steps_reported // 2 + 1
    total = keep + 30
    with h5py.File(path, "r", swmr=True) as f:
        valid = f["steps"]["step"][:shortest(f, "steps")]
        last_step = int(valid[valid >= 0].max())
        evals_valid = f["eval"]["step"][:shortest(f, "eval")]
        last_eval = int(evals_valid[evals_valid >= 0].max()) if len(evals_valid) else -1
    out = subprocess.run([probe, "resume", path, str(keep), str(total), str(FLUSH_EVERY)], check=True,
                         capture_output=True, text=True).stdout
    fields = dict(item.split("=", 1) for item in out.split(" warning=")[0].split())
    if int(fields["attempt"]) != 1 or int(fields["resumed_from_step"]) != keep:
        fail(f"resume printed {out!r}; expected attempt 1, resumed_from_step {keep}")
    if int(fields["last_step"]) != last_step:
        fail(f"last_step {fields['last_step']}, the old file's newest step is {last_step}")
    want_wall = max(step_row(last_step)["wall_time_s"], eval_row(last_eval, False)["wall_time_s"] if last_eval > 0 else 0)
    if float(fields["last_wall_time_s"]) != want_wall:
        fail(f"last_wall_time_s {fields['last_wall_time_s']}, expected {want_wall}")
    for rank in range(WORLD):
        for column in ("gpu_energy_j", "cpu_energy_j"):
            got = float(fields[f"last_{column}_{rank}"])
            if not same(got, step_row(last_step)[column][rank]):
                fail(f"last_{column}({rank}) = {got}, expected {step_row(last_step)[column][rank]}")
    if out.split(" warning=")[1].strip() != "none":
        fail(f"resume of a readable file warned: {out!r}")

    with h5py.File(path, "r") as f:  # finished: no SWMR needed
        lengths = check_layout(f)
        eval_steps = [e for e in range(10, total + 1, 10)]
        if lengths != {"steps": {total}, "eval": {len(eval_steps)}}:
            fail(f"after resume: row counts {lengths}, expected {total} steps and {len(eval_steps)} evals")
        check_rows(f, "steps", STEP_COLUMNS, [step_row(s) for s in range(1, total + 1)])
        check_rows(f, "eval", EVAL_COLUMNS, [eval_row(e, False) for e in eval_steps])
        attrs = probe_attributes(total)
        attrs.update({"status": "completed", "attempt": 1, "resumed_from_step": keep, "start_time_utc": start_time,
                      "error": "", "error_step": -1})
        check_root_attributes(f, attrs)
        if int(f["summary"].attrs["steps_completed"]) != total:
            fail(f"summary steps_completed {f['summary'].attrs['steps_completed']}, expected {total}")
    leftovers = [n for n in os.listdir(work) if n != "killed.h5"]
    if leftovers:
        fail(f"files left beside the run file: {leftovers}")
    print(f"resumed from step {keep}: attempt 1, {total} steps, finished file opens without SWMR")


if __name__ == "__main__":
    main()
