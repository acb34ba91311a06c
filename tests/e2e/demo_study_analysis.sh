#!/usr/bin/env bash
# The demo study, shortened, run by the real trainer, then t5scale-analyze on its run files: every run appears in
# the runs table as completed, the scaling table covers the 1, 2 and 4-rank runs, and the report is written.
#   demo_study_analysis.sh BUILD_DIR WORK_DIR PYTHON
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD_DIR=$1 WORK=$2 PYTHON=$3
rm -rf "$WORK"
"$ROOT/scripts/demo_study.sh" "$BUILD_DIR" "$WORK" --set train.max_steps=30 --set eval.every_steps=15 \
  --set checkpoint.every_steps=0 --set train.log_every=10
PYTHONPATH="$ROOT/analysis" "$PYTHON" - "$WORK" <<'PY'
import sys
import pandas as pd
from pathlib import Path

work = Path(sys.argv[1])
runs = pd.read_csv(work / "report" / "runs.csv")
assert len(runs) == 5, f"{len(runs)} runs in the table"
assert set(runs["status"]) == {"completed"}, runs["status"].tolist()
assert sorted(runs["world_size"]) == [1, 2, 2, 4, 4], runs["world_size"].tolist()
assert (runs["steps_completed"] == 30).all(), runs["steps_completed"].tolist()
scaling = pd.read_csv(work / "report" / "scaling.csv")
assert set(scaling["world_size"]) == {1, 2, 4}, scaling["world_size"].tolist()
html = (work / "report" / "report.html").read_text()
assert "w4-tp2-dp2" in html and "<img" in html, "the report lacks runs or figures"
print(f"demo study analysed: {len(runs)} runs, report {work / 'report' / 'report.html'}")
PY
