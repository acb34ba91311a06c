#!/bin/bash
# The LR-scaling study on the manual pages (jobs/lr-scaling-manpages.yaml) in miniature, through the path a user
# takes: the corpus maker on a sample of 160 pages, t5scale-prep with a tokenizer trained on it, the real spec's base
# (model, data settings, schedule, evaluations every half epoch, Slurm settings) with 3 of its runs (k = 1 on one
# node; k = 2 on two nodes under LR rules none and sqrt) and 2 epochs, planned, submitted with t5scale-study to the
# local Slurm cluster, followed with `status`, analysed with t5scale-analyze. The report's tables are checked
# against the run files (h5py): each run's final metrics, the per-rule points (the k = 1 run on every rule's
# curve), the evaluation steps (every half epoch of that run's batch), the steps and the summary.
#   tests/study/run_lr_study_miniature.sh SOURCE_DIR BIN_DIR PYTHON
# The cluster: ctest's shared one (T5SCALE_LOCAL_CLUSTER), or one this test starts (tests/multinode/common.sh).
set -uo pipefail

test_name=lr-study-miniature
# shellcheck source=tests/multinode/common.sh
. "$(dirname "$0")/../multinode/common.sh" "$@"
test_timeout_s=${T5SCALE_STUDY_MINIATURE_TIMEOUT_S:-200}

check_multinode_prerequisites
for program in t5scale-study t5scale-prep t5scale-train; do
  [ -x "$bin/$program" ] || fail "$bin/$program is missing: build the target $program"
done
make_test_folder
use_cluster
start_s=$SECONDS

step="the corpus maker on 160 pages"
data=$work/data
"$python" "$src/data_prep/manpages/make_corpus.py" --out "$data" --max-pages 160 >"$work/corpus.log" 2>&1 ||
  fail "make_corpus.py: $(tail -n 5 "$work/corpus.log")"
step="t5scale-prep of the section task, with a tokenizer trained on it"
"$bin/t5scale-prep" --recipe "$src/data_prep/recipes/manpages_section.yaml" --input "$data/corpus.jsonl" \
  --out "$data/section.h5" --train-tokenizer --tokenizer-out "$data/spiece.model" --vocab-size 800 \
  >"$work/prep.log" 2>&1 || fail "t5scale-prep: $(tail -n 5 "$work/prep.log")"

step="the miniature spec from jobs/lr-scaling-manpages.yaml"
"$python" - "$src/jobs/lr-scaling-manpages.yaml" "$work/miniature.yaml" "$data" <<'EOF' || fail "cannot write it"
import sys
import yaml

spec = yaml.safe_load(open(sys.argv[1]))
data = sys.argv[3]
spec["study"] = "lr-miniature"
spec["base"]["data"].update(dataset=f"{data}/section.h5", tokenizer=f"{data}/spiece.model")
spec["base"]["train"]["epochs"] = 2
spec.pop("repeats", None)
spec["runs"] = [{"name": "k1", "set": {"nodes": 1, "gpus_per_node": 1}},
                {"name": "k2", "set": {"nodes": 2, "gpus_per_node": 1}, "axes": {"lr_scaling.rule": ["none", "sqrt"]}}]
spec["slurm"]["extra_sbatch"] = ["--job-name=lr-miniature", "--dependency=singleton"]
yaml.safe_dump(spec, open(sys.argv[2], "w"), sort_keys=False)
EOF
study_args=(--out "$work/jobs" --results-dir "$work/results" --bin "$bin")
step="t5scale-study plan"
"$bin/t5scale-study" plan "$work/miniature.yaml" "${study_args[@]}" >"$work/plan.log" 2>&1 ||
  fail "plan: $(tail -n 8 "$work/plan.log")"
grep -q '^study lr-miniature .*: 3 run(s), 0 invalid' "$work/plan.log" || fail "the plan: $(head -n 3 "$work/plan.log")"
step="t5scale-study submit"
"$bin/t5scale-study" submit "$work/miniature.yaml" "${study_args[@]}" >"$work/submit.log" 2>&1 ||
  fail "submit: $(tail -n 8 "$work/submit.log")"
mapfile -t job_ids < <(tail -n +2 "$work/jobs/jobs.csv" | cut -d, -f2)
[ "${#job_ids[@]}" -eq 3 ] || fail "expected 3 jobs in jobs.csv: $(cat "$work/jobs/jobs.csv")"

step="the 3 jobs"
limit=$(step_limit) || exit 1
deadline=$((SECONDS + limit))
until queue=$(squeue -h -r -o %i 2>/dev/null) && ! grep -qxF -f <(printf '%s\n' "${job_ids[@]}") <<<"$queue"; do
  # A job held after its launch failed would keep the others (singleton) waiting too: fail now, with the reason.
  check_jobs_can_start "${job_ids[@]}"
  [ $SECONDS -ge $deadline ] && fail "jobs still queued or running after $limit s: $(squeue 2>&1)"
  sleep 0.5
done
"$bin/t5scale-study" status "$work/miniature.yaml" "${study_args[@]}" >"$work/status.log" 2>&1 ||
  fail "status: $(cat "$work/status.log")"
# Each run's own line of the table (run, job, slurm, elapsed, run file, attempt, step, state): Slurm's state
# COMPLETED, the run file completed at its last step, the run's state completed; and the summary counts exactly 3.
# (Counting lines with " completed" counted the summary line as a run.)
for run in k1 k2-none k2-sqrt; do
  grep -Eq "^$run +[0-9]+ +COMPLETED +[^ ]+ +completed +[0-9]+ +([0-9]+)/\1 +completed$" "$work/status.log" ||
    fail "t5scale-study status does not show run $run completed at its last step: $(cat "$work/status.log")"
done
grep -q '^summary: 3 completed$' "$work/status.log" ||
  fail "the status summary is not '3 completed': $(cat "$work/status.log")"

step="t5scale-analyze"
"$src/analysis/t5scale-analyze" "$work/results" --metric macro_f1 >"$work/analyze.log" 2>&1 ||
  fail "t5scale-analyze: $(tail -n 8 "$work/analyze.log")"
step="the report's tables against the run files"
"$python" - "$work/results" <<'EOF' || fail "the report's tables differ from the run files"
import math
import sys
from pathlib import Path

import h5py
import pandas as pd

results = Path(sys.argv[1])
report = results / "report"
problems = []
final = {}
for run, (world, rule) in {"k1": (1, "none"), "k2-none": (2, "none"), "k2-sqrt": (2, "sqrt")}.items():
    with h5py.File(results / f"{run}.h5", "r") as f:
        a = f.attrs
        text = lambda k: a[k].decode() if isinstance(a[k], bytes) else str(a[k])
        if text("status") != "completed" or int(a["world_size"]) != world or text("lr_scaling_rule") != rule:
            problems.append(f"{run}: status {text('status')}, world {a['world_size']}, rule {text('lr_scaling_rule')}")
        per_epoch, steps = int(a["steps_per_epoch"]), int(f["summary"].attrs["steps_completed"])
        if steps != 2 * per_epoch:
            problems.append(f"{run}: {steps} steps, not 2 epochs of {per_epoch}")
        every = max(1, round(0.5 * per_epoch + 1e-9))
        expected = sorted(set(range(every, steps + 1, every)) | {steps})
        evals = f["eval/step"][:].tolist()
        if evals != expected:
            problems.append(f"{run}: evaluations at steps {evals}, expected every half epoch: {expected}")
        final[run] = {m: float(f[f"eval/{m}"][-1]) for m in ("macro_f1", "loss", "accuracy")}
        final[run]["steps"], final[run]["global_batch"] = steps, int(a["global_batch"])
runs = pd.read_csv(report / "runs.csv").set_index("run_id")
for run, want in final.items():
    for column, key in (("final_macro_f1", "macro_f1"), ("final_loss", "loss"), ("final_accuracy", "accuracy"),
                        ("steps_completed", "steps")):
        got = float(runs.loc[run, column])
        if not math.isclose(got, want[key], rel_tol=1e-6, abs_tol=1e-9):
            problems.append(f"runs.csv {run} {column}: {got}, the run file {want[key]}")
rules = pd.read_csv(report / "lr_rules.csv")
for metric in ("macro_f1", "loss"):
    points = rules[rules["metric"] == metric].set_index(["lr_scaling_rule", "global_batch"])
    b1, b2 = final["k1"]["global_batch"], final["k2-none"]["global_batch"]
    expected = {("none", b1): final["k1"][metric], ("sqrt", b1): final["k1"][metric],  # k = 1 on every curve
                ("none", b2): final["k2-none"][metric], ("sqrt", b2): final["k2-sqrt"][metric]}
    if sorted(points.index) != sorted(expected):
        problems.append(f"lr_rules.csv {metric}: points {sorted(points.index)}, expected {sorted(expected)}")
        continue
    for key, want in expected.items():
        got = float(points.loc[key, "mean"])
        delta = float(points.loc[key, "delta_vs_k1"])
        if not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
            problems.append(f"lr_rules.csv {metric} {key}: {got}, the run file {want}")
        if not math.isclose(delta, want - final["k1"][metric], rel_tol=1e-6, abs_tol=1e-9):
            problems.append(f"lr_rules.csv {metric} {key}: delta_vs_k1 {delta}")
recovery = pd.read_csv(report / "lr_recovery.csv")
row = recovery[recovery["metric"] == "macro_f1"]
if len(row) != 1:
    problems.append(f"lr_recovery.csv: {len(row)} macro_f1 rows, expected one (global batch {b2})")
else:
    gap = final["k1"]["macro_f1"] - final["k2-none"]["macro_f1"]
    got = float(row["sqrt_recovered_pct"].iloc[0])
    want = (final["k2-sqrt"]["macro_f1"] - final["k2-none"]["macro_f1"]) / gap * 100 if gap else float("nan")
    if not (math.isclose(got, want, rel_tol=1e-6) or (math.isnan(got) and math.isnan(want))):
        problems.append(f"lr_recovery.csv: sqrt recovered {got}%, the run files give {want}%")
html = (report / "report.html").read_text()
for needle in ("per rule and global batch", "lr_scaling_lr-miniature"):
    if needle not in html:
        problems.append(f"report.html does not contain {needle!r}")
if problems:
    print("\n".join(problems))
    sys.exit(1)
print("the report's tables match the 3 run files:", {r: round(v["macro_f1"], 4) for r, v in final.items()})
EOF
[ -n "$state" ] && stop_cluster "$state" && state=""
status=0
echo "PASS: the LR-scaling study in miniature, from the corpus maker to the report, in $((SECONDS - start_s)) s after" \
     "the cluster was ready"
