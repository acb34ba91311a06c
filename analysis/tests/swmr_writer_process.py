"""A writer process for the tests: writes a run file in SWMR mode through t5scale's writer (runfile_writer) and
then waits, so that a test can read the file while it is still being written, or read what a killed writer left.

    python swmr_writer_process.py PATH hold     # 20 steps flushed; "flushed 20"; on "finish": 20 more, finished
    python swmr_writer_process.py PATH kill N   # 20 steps flushed, N more appended unflushed, the writer killed
                                                # (SIGKILL); "ready"; waits
    python swmr_writer_process.py PATH end      # 20 steps, finished; then held open without SWMR (locked), as
                                                # the trainer holds it while it writes the final summary:
                                                # "ending"; on "finish": closed

The run (hand values in test_live_files.py): 1 node x 2 GPUs, global batch 16, 0.5 s per step, an evaluation of
1 s after step 10 (rougeL 0.3, eval loss 2.0), 200 W per GPU, 40 W of CPU packages on the node, 8 USD per node-hour,
PUE 1.5, 400 g CO2 per kWh.
"""

import sys
import time
from pathlib import Path

import h5py

# This checkout's package before an installed copy (as conftest.py does for the tests): the writer takes the run
# file's schema from it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import runfile_writer as w  # noqa: E402

STEP_TIME_S, EVAL_TIME_S = 0.5, 1.0
RUN = dict(run_id="live-run", study="live", nodes=1, gpus_per_node=2, global_batch=16, micro_batch=8,
           price=8.0, low_priority_price=2.0, pue=1.5, carbon=400.0, energy_source_cpu="rapl")
EVALS = [(10, 0.3, 2.0), (40, 0.5, 1.5)]


def rows(first, count):
    return w.step_rows(first, count, world=2, global_batch=16, step_time_s=STEP_TIME_S,
                       eval_steps=[e[0] for e in EVALS], eval_time_s=EVAL_TIME_S, gpu_power_w=200.0, cpu_power_w=40.0)


def eval_rows(index):
    step, rougeL, loss = EVALS[index]
    return w.eval_row(step, index, step_time_s=STEP_TIME_S, eval_time_s=EVAL_TIME_S, rougeL=rougeL, loss=loss)


def main():
    path, mode = sys.argv[1], sys.argv[2]
    writer = w.RunWriter(path, w.root_attributes(max_steps=40, **RUN))
    writer.append_steps(rows(1, 10))
    writer.append_eval(eval_rows(0))
    writer.append_steps(rows(11, 10))
    writer.flush()
    if mode == "hold":
        print("flushed 20", flush=True)
        if sys.stdin.readline().strip() != "finish":
            return 1
        writer.append_steps(rows(21, 20))
        writer.append_eval(eval_rows(1))
        writer.flush()
        writer.finish("completed")
        print("finished", flush=True)
        return 0
    if mode == "end":
        writer.finish("completed")
        with h5py.File(path, "r+"):  # the end of a run: the file is open without SWMR (locked)
            print("ending", flush=True)
            if sys.stdin.readline().strip() != "finish":
                return 1
        print("finished", flush=True)
        return 0
    extra = int(sys.argv[3])
    if extra:
        writer.append_steps(rows(21, extra))
    writer.kill()
    print("ready", flush=True)
    while True:  # until killed
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
