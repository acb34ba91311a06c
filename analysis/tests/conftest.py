"""Shared fixtures: the package and the fixture writer on sys.path, and a scaling/LR-scaling study of run files
whose numbers are worked out by hand in `STUDY` and in the tests."""

import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
ANALYSIS_DIR = TESTS_DIR.parent
for folder in (ANALYSIS_DIR, TESTS_DIR):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import runfile_writer as w  # noqa: E402

# The "scale" study after seed 002: 8 samples per GPU (fixed micro batch), 640 samples in all (so 640 / global
# steps), LR rule none at 1, 2, 4, 8 GPUs and sqrt at 1, 4, 8 GPUs; 12 USD per node-hour (3 at low priority),
# 300 W per GPU, PUE 1.2, 475 g/kWh; two evaluations of 2 s each, after the middle and the last step.
# (run_id, rule, nodes, gpus_per_node, step_time_s, rougeL at the middle eval, rougeL at the last eval)
STUDY = [
    ("none-w1", "none", 1, 1, 1.0, 0.35, 0.40),
    ("none-w2", "none", 1, 2, 1.0, 0.36, 0.395),
    ("none-w4", "none", 1, 4, 1.25, 0.30, 0.35),
    ("none-w8", "none", 2, 4, 1.6, 0.31, 0.30),
    ("sqrt-w1", "sqrt", 1, 1, 1.0, 0.36, 0.41),
    ("sqrt-w4", "sqrt", 1, 4, 1.25, 0.33, 0.39),
    ("sqrt-w8", "sqrt", 2, 4, 1.6, 0.32, 0.37),
]
BASE_LR, REFERENCE_BATCH = 1e-3, 8


def write_study(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for run_id, rule, nodes, gpn, step_time_s, mid, last in STUDY:
        world = nodes * gpn
        global_batch = 8 * world
        n = 640 // global_batch
        lr = BASE_LR * (global_batch / REFERENCE_BATCH) ** 0.5 if rule == "sqrt" else BASE_LR
        w.synthetic_run(folder / f"{run_id}.h5", n_steps=n, step_time_s=step_time_s,
                        evals=[(n // 2, mid, 2.0 - mid), (n, last, 2.0 - last)], eval_time_s=2.0,
                        gpu_power_w=300.0, cpu_power_w=50.0 if run_id == "none-w1" else None,
                        run_id=run_id, study="scale", nodes=nodes, gpus_per_node=gpn, global_batch=global_batch,
                        micro_batch=8, lr_scaling_rule=rule, base_lr=BASE_LR, effective_lr=lr,
                        reference_global_batch=REFERENCE_BATCH, price=12.0, low_priority_price=3.0, pue=1.2,
                        carbon=475.0, energy_source_cpu="rapl" if run_id == "none-w1" else "none")


@pytest.fixture(scope="session")
def study_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("results") / "scale"
    write_study(folder)
    return folder
