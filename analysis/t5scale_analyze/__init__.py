"""t5scale_analyze: tables, figures, resource cards and an HTML report from a folder of t5scale run files.

    from t5scale_analyze import analyze, write_report, read_run
    analysis = analyze("results/demo")          # runs table, scaling, LR-scaling and Pareto tables
    write_report(analysis, "results/demo/report")
"""

from .report import Analysis, analyze, write_report
from .runfile import (FORMAT, SCHEMA_VERSION, Attempt, NotARunFile, Run, Skipped, read_folder, read_run,
                      read_run_file)

__all__ = ["Analysis", "analyze", "write_report", "FORMAT", "SCHEMA_VERSION", "Attempt", "NotARunFile", "Run",
           "Skipped", "read_folder", "read_run", "read_run_file"]
