"""The t5scale-analyze command: a results folder in, tables, figures, resource cards and an HTML report out.

    t5scale-analyze RESULTS_DIR [--out DIR] [--metric NAME] [--cards-only]     the report
    t5scale-analyze watch RESULTS_DIR [--out DIR] [--metric NAME] [--every S]  the report, refreshed while jobs run
    t5scale-analyze tensorboard RESULTS_DIR --out DIR                         the runs as TensorBoard event files

(A results folder named "watch" or "tensorboard" is given as ./watch.)"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .cards import cards_markdown
from .report import analyze, write_report
from .runfile import EVAL_METRICS, SET_ASIDE_NAME, UNFINISHED, metric_label

EXIT_NO_RUNS = 2


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="t5scale-analyze",
        description="Reads every t5scale run file (*.h5, recursively) under RESULTS_DIR, also runs still being "
                    "written or killed, and writes the runs table (CSV, Parquet), scaling, LR-scaling and Pareto "
                    "tables, resource cards, figures (PNG, SVG) and a self-contained HTML report. Also: "
                    "t5scale-analyze watch RESULTS_DIR (the report refreshed while jobs run) and t5scale-analyze "
                    "tensorboard RESULTS_DIR --out DIR (TensorBoard event files); --help after either.")
    parser.add_argument("results_dir", metavar="RESULTS_DIR", type=Path, help="folder of run files")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="output folder (default RESULTS_DIR/report)")
    parser.add_argument("--metric", default="auto",
                        help="eval metric for the LR-scaling report, cards and Pareto front: "
                             + ", ".join(metric_label(m) for m in EVAL_METRICS)
                             + " (default auto: the first of these that a run measured)")
    parser.add_argument("--cards-only", action="store_true", help="print the resource cards and write nothing")
    return parser.parse_args(argv)


def parse_watch_args(argv):
    parser = argparse.ArgumentParser(
        prog="t5scale-analyze watch",
        description="Follows the jobs of RESULTS_DIR from their run files (read while the jobs write them) and "
                    "refreshes the report every --every seconds, with a line per run on the terminal; stops once "
                    "every run has ended (completed, failed, diverged or stale), or on Ctrl-C.")
    parser.add_argument("results_dir", metavar="RESULTS_DIR", type=Path, help="folder of run files")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="output folder (default RESULTS_DIR/report)")
    parser.add_argument("--metric", default="auto", help="eval metric, as for t5scale-analyze RESULTS_DIR")
    parser.add_argument("--every", type=float, default=60.0, metavar="S",
                        help="seconds between refreshes (default 60)")
    parser.add_argument("--refreshes", type=int, default=0, metavar="N",
                        help="stop after N refreshes (default 0: until every run has ended)")
    return parser.parse_args(argv)


def parse_tensorboard_args(argv):
    parser = argparse.ArgumentParser(
        prog="t5scale-analyze tensorboard",
        description="Writes every run of RESULTS_DIR as TensorBoard event files, a folder per run "
                    "(DIR/<study>/<run>/): train loss, LR, grad norm, throughput, step time and its phases, MFU, "
                    "memory, power and the eval metrics against the step, the config and the first generations "
                    "of each evaluation as text. Open with: tensorboard --logdir DIR. Exporting again replaces "
                    "the event files of those runs.")
    parser.add_argument("results_dir", metavar="RESULTS_DIR", type=Path, help="folder of run files")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="TensorBoard log folder")
    return parser.parse_args(argv)


def _results_dir_error(results_dir: Path) -> int:
    print(f"t5scale-analyze: error: RESULTS_DIR '{results_dir}' is not a folder", file=sys.stderr)
    return EXIT_NO_RUNS


def watch_main(argv) -> int:
    from .watch import watch
    args = parse_watch_args(argv)
    if not args.results_dir.is_dir():
        return _results_dir_error(args.results_dir)
    if not 0 < args.every < float("inf"):
        print(f"t5scale-analyze watch: error: --every {args.every}: must be a number of seconds above 0", file=sys.stderr)
        return EXIT_NO_RUNS
    out_dir = args.out if args.out is not None else args.results_dir / "report"
    try:
        return watch(args.results_dir, out_dir, args.metric, args.every, max_refreshes=args.refreshes)
    except ValueError as e:
        print(f"t5scale-analyze watch: error: --metric: {e}", file=sys.stderr)
        return EXIT_NO_RUNS


def tensorboard_main(argv) -> int:
    from .runfile import read_folder
    from .tensorboard_export import export
    args = parse_tensorboard_args(argv)
    if not args.results_dir.is_dir():
        return _results_dir_error(args.results_dir)
    runs, skipped = read_folder(args.results_dir)
    for s in skipped:
        print(f"t5scale-analyze tensorboard: skipped {s.path}: {s.reason}", file=sys.stderr)
    if not runs:
        print(f"t5scale-analyze tensorboard: error: no t5scale run files under '{args.results_dir}'", file=sys.stderr)
        return EXIT_NO_RUNS
    try:
        written = export(runs, args.out)
    except ImportError as e:
        print(f"t5scale-analyze tensorboard: error: the tensorboard package is missing ({e}): run "
              f"scripts/setup.sh, or pip install tensorboard", file=sys.stderr)
        return EXIT_NO_RUNS
    for run, log_dir, counts in written:
        print(f"{run.run_id}: {len(counts)} series, {sum(counts.values())} events in {log_dir}")
    print(f"{len(written)} run(s) exported; open them with: tensorboard --logdir {args.out}")
    return 0


SUBCOMMANDS = {"watch": watch_main, "tensorboard": tensorboard_main}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in SUBCOMMANDS:
        return SUBCOMMANDS[argv[0]](argv[1:])
    args = parse_args(argv)
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
        if run.status in UNFINISHED:
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
