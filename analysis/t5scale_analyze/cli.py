"""The t5scale-analyze command: a results folder in, tables, figures, resource cards and an HTML report out."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .cards import cards_markdown
from .report import analyze, write_report
from .runfile import EVAL_METRICS, SET_ASIDE_NAME, metric_label

EXIT_NO_RUNS = 2


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="t5scale-analyze",
        description="Reads every t5scale run file (*.h5, recursively) under RESULTS_DIR, also runs still being "
                    "written or killed, and writes the runs table (CSV, Parquet), scaling, LR-scaling and Pareto "
                    "tables, resource cards, figures (PNG, SVG) and a self-contained HTML report.")
    parser.add_argument("results_dir", metavar="RESULTS_DIR", type=Path, help="folder of run files")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="output folder (default RESULTS_DIR/report)")
    parser.add_argument("--metric", default="auto",
                        help="eval metric for the LR-scaling report, cards and Pareto front: "
                             + ", ".join(metric_label(m) for m in EVAL_METRICS)
                             + " (default auto: the first of these that a run measured)")
    parser.add_argument("--cards-only", action="store_true", help="print the resource cards and write nothing")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not args.results_dir.is_dir():
        print(f"t5scale-analyze: error: RESULTS_DIR '{args.results_dir}' is not a folder", file=sys.stderr)
        return EXIT_NO_RUNS
    try:
        analysis = analyze(args.results_dir, args.metric)
    except ValueError as e:
        print(f"t5scale-analyze: error: --metric: {e}", file=sys.stderr)
        return EXIT_NO_RUNS
    for skipped in analysis.skipped:
        # a set-aside file of a run that cannot be joined leaves the run's totals short
        warning = "warning: " if SET_ASIDE_NAME.match(skipped.path.name) else ""
        print(f"t5scale-analyze: {warning}skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
    if not analysis.runs:
        print(f"t5scale-analyze: error: no t5scale run files (*.h5 with format 't5scale-run') under "
              f"'{args.results_dir}'" + (f"; {len(analysis.skipped)} other .h5 file(s) skipped" if analysis.skipped
                                          else ""), file=sys.stderr)
        return EXIT_NO_RUNS
    for run in analysis.runs:
        if len(run.attempts) > 1:
            print(f"t5scale-analyze: note: {run.run_id} ({run.path}) joins the run files of its attempts on "
                  f"{len(run.attempts)} grids: " + ", ".join(f"{a.path.name} (world size {a.world_size})"
                                                            for a in run.attempts), file=sys.stderr)
        if run.status in ("incomplete", "stale", "failed"):
            print(f"t5scale-analyze: note: {run.run_id} ({run.path}) is {run.status}: {'; '.join(run.notes)}",
                  file=sys.stderr)

    print(cards_markdown(analysis.table, analysis.metric))
    if args.cards_only:
        return 0
    out_dir = args.out if args.out is not None else args.results_dir / "report"
    written = write_report(analysis, out_dir)
    print(f"{len(analysis.runs)} run(s) analysed; tables, cards and figures in {out_dir}")
    print(f"report: {written['report']}")
    return 0
