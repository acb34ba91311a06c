"""`t5scale-analyze watch RESULTS_DIR`: follows the jobs of a results folder from their run files, which the jobs
write in SWMR mode (readable while written, see runfile.py), and refreshes the report every --every seconds: a
line per run on the terminal (status, step of max steps, smoothed loss, the latest eval metric) and the whole
report (tables, figures, report.html) in the output folder. It stops once every run has ended (completed, failed,
diverged or stale; a preempted run waits for its requeued job), or on Ctrl-C; while no run file is there yet (jobs still queued) it waits for them.
"""

from __future__ import annotations

import datetime
import sys
import time

from .plots import smoothed
from .report import analyze, write_report
from .runfile import metric_label

# A preempted run is not ended: Slurm requeues its job, which resumes it in the same file. Nor is a running or an
# incomplete one (silent beyond its flush interval): it is followed until it ends or turns stale.
ENDED = ("completed", "failed", "diverged", "stale")


def run_line(run, metric) -> str:
    steps = run.steps
    last = int(steps["step"].iloc[-1]) if len(steps) and "step" in steps else 0
    max_steps = run.attrs.get("max_steps", "?")
    parts = [f"{run.run_id:<28}", f"{run.status:<10}", f"step {last}/{max_steps}"]
    if len(steps) and "loss" in steps:
        parts.append(f"loss {smoothed(steps['loss'])[-1]:.4g}")
    if metric is not None and len(run.evals) and metric in run.evals:
        values = run.evals[metric].astype(float)
        if values.notna().any():
            parts.append(f"{metric_label(metric)} {values.dropna().iloc[-1]:.4g} "
                         f"(step {int(run.evals['step'][values.notna()].iloc[-1])})")
    return "  ".join(parts)


def watch(results_dir, out_dir, metric: str, every_s: float, out=sys.stdout, max_refreshes: int = 0) -> int:
    """Refreshes until every run has ended (0), or Ctrl-C (0); max_refreshes > 0 stops after that many (0 = no
    limit). ValueError for an unknown metric."""
    refreshes, waiting_said = 0, False
    skipped_said = {}  # path -> the reason said last: a file skipped is named once, and again when its reason changes
    try:
        while True:
            analysis = analyze(results_dir, metric)
            now = datetime.datetime.now().strftime("%H:%M:%S")
            for s in analysis.skipped:
                if skipped_said.get(s.path) != s.reason:
                    print(f"[{now}] skipped {s.path}: {s.reason}", file=out, flush=True)
                    skipped_said[s.path] = s.reason
            if not analysis.runs:
                if not waiting_said:
                    print(f"[{now}] no run files under {results_dir} yet: waiting for the jobs to start", file=out,
                          flush=True)
                    waiting_said = True
            else:
                write_report(analysis, out_dir)
                ended = sum(1 for run in analysis.runs if run.status in ENDED)
                print(f"[{now}] {len(analysis.runs)} run(s), {ended} ended; report: {out_dir / 'report.html'}",
                      file=out)
                for run in analysis.runs:
                    print("  " + run_line(run, analysis.metric), file=out)
                out.flush()
                if ended == len(analysis.runs):
                    print("every run has ended", file=out, flush=True)
                    return 0
            refreshes += 1
            if max_refreshes and refreshes >= max_refreshes:
                return 0
            time.sleep(every_s)
    except KeyboardInterrupt:
        print("stopped (Ctrl-C)", file=out, flush=True)
        return 0
