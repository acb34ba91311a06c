#!/usr/bin/env bash
# The demo study, shortened, run by the real trainer, then t5scale-analyze on its run files: every run appears in
# the runs table as completed, the scaling table covers the 1, 2 and 4-rank runs, every run counts the same model
# FLOPs (the same examples, unpadded), and the report is written; where no energy was measured (no NVML, no RAPL),
# the trainer's resource card, the run file and the analysis's card all say "unknown" with the same estimate beside
# it.
#   demo_study_analysis.sh BUILD_DIR WORK_DIR PYTHON
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD_DIR=$1 WORK=$2 PYTHON=$3
rm -rf "$WORK" "$WORK.log"
"$ROOT/scripts/demo_study.sh" "$BUILD_DIR" "$WORK" --set train.max_steps=30 --set eval.every_steps=15 \
  --set checkpoint.every_steps=0 --set train.log_every=10 | tee "$WORK.log"
PYTHONPATH="$ROOT/analysis" "$PYTHON" - "$WORK" "$WORK.log" <<'PY'
import math
import re
import sys
import h5py
import pandas as pd
from pathlib import Path

work = Path(sys.argv[1])
log = Path(sys.argv[2]).read_text()
runs = pd.read_csv(work / "report" / "runs.csv")
assert len(runs) == 5, f"{len(runs)} runs in the table"
assert set(runs["status"]) == {"completed"}, runs["status"].tolist()
assert sorted(runs["world_size"]) == [1, 2, 2, 4, 4], runs["world_size"].tolist()
assert (runs["steps_completed"] == 30).all(), runs["steps_completed"].tolist()
scaling = pd.read_csv(work / "report" / "scaling.csv")
assert set(scaling["world_size"]) == {1, 2, 4}, scaling["world_size"].tolist()
html = (work / "report" / "report.html").read_text()
assert "w4-tp2-dp2" in html and "<img" in html, "the report lacks runs or figures"

cards = (work / "report" / "cards.md").read_text()
estimated = 0
flops = {}
for name in runs["run_id"]:
    with h5py.File(work / f"{name}.h5", "r") as f:
        measured = f.attrs["energy_source_gpu"] != b"none" or f.attrs["energy_source_cpu"] != b"none"
        summary = dict(f["summary"].attrs)
    flops[name] = float(summary["total_flops"])
    card = log.split(f"---- resource card: {name} ")[1].split("---- resource card:")[0]
    if measured:
        assert math.isnan(summary["estimated_energy_kwh"]) and summary["energy_estimate_method"] == b"", summary
        continue
    estimated += 1
    co2 = float(summary["estimated_co2_kg"])
    assert math.isnan(summary["energy_kwh"]) and co2 > 0 and b"CodeCarbon constant mode" in summary["energy_estimate_method"]
    line = re.search(r"emissions +unknown \(no energy measured\); estimated ([0-9.]+) kg", card)
    assert line and abs(float(line.group(1)) - co2) <= 5e-7 + 1e-6 * co2, f"{name}: card {line and line.group(0)} vs {co2}"
    assert f"unknown (energy not measured); estimated {co2:.4g} (kg CO2eq" in cards, f"{name}: {co2:.4g} not in cards.md"
# The same examples on every grid: the same model FLOPs, counted on their own lengths whatever the micro-batches'
# padding (a replica's smaller micro-batches pad less).
first = next(iter(flops.values()))
assert all(abs(v - first) <= 1e-9 * first for v in flops.values()), f"total FLOPs differ between grids: {flops}"
print(f"demo study analysed: {len(runs)} runs ({estimated} with estimated energy), report {work / 'report' / 'report.html'}")
PY
