"""A run resumed on another grid: the resuming job (t5scale's writer, through runfile_writer) set the old run file
aside as <run>.h5.world<N>.<stamp> and started a new <run>.h5 that carries the old grid's figures; the analysis
joins the files' rows into one run and takes the newest file's figures. The numbers are worked out by hand.

The run "resumed" (global batch 8, 12 USD per node-hour, 6 at low priority, PUE 1.2, 475 g/kWh, 300 W per GPU,
50 W of CPU per node, evaluations of 2 s):
  world 1 (1 node x 1 GPU), set aside: steps 1-12 of 1 s, evaluations after steps 5 and 12; its job was killed
    after flushing step 12 (status "running"). Wall time 12 + 2 x 2 = 16 s; GPU 300 x 12 = 3600 J; CPU 50 x 12 = 600 J.
    Cost 12 x 1 x 16 / 3600 = 192 / 3600 USD.
  world 2 (2 nodes x 1 GPU), resumed from the checkpoint of step 10: steps 11-20 of 0.5 s, an evaluation after
    step 20, completed. Wall time (its own, from its start) 10 x 0.5 + 2 = 7 s; GPU 2 x 300 x 5 = 3000 J; CPU
    50 x 5 per node x 2 nodes = 500 J. Cost 12 x 2 x 7 / 3600 = 168 / 3600 USD.
Joined: steps 1-10 of the world-1 file and 11-20 of the world-2 file (the world-1 rows of steps 11 and 12 and its
evaluation after step 12 were redone: left out, their time and energy counted; the world-2 file's /summary holds
it all). Wall time 16 + 7 = 23 s, cost
360 / 3600 = 0.1 USD, node-hours (1 x 16 + 2 x 7) / 3600 = 30 / 3600, energy (6600 + 1100) J / 3.6e6 x 1.2;
training time 10 x 1 + 10 x 0.5 = 15 s, 20 x 8 = 160 samples, 160 / 15 samples/s.
"""

import math

import numpy as np
import pytest

import runfile_writer as w
from t5scale_analyze import analyze, read_folder, read_run
from t5scale_analyze.cards import card_markdown

WORLD1_ASIDE = "resumed.h5.world1.20261125T180102Z"  # renamed to this stamp after the writer set it aside
UNREADABLE_ASIDE = "resumed.h5.unreadable.20261125T170000Z"
COMMON = dict(run_id="resumed", study="grid", global_batch=8, price=12.0, low_priority_price=6.0, pue=1.2,
              carbon=475.0, energy_source_cpu="rapl", max_steps=20)

WALL_S = 16.0 + 7.0
COST_USD = 12 * (1 * 16.0 + 2 * 7.0) / 3600
NODE_HOURS = (1 * 16.0 + 2 * 7.0) / 3600
GPU_J, CPU_J = 3600.0 + 3000.0, 600.0 + 500.0
ENERGY_KWH = (GPU_J + CPU_J) / 3.6e6 * 1.2


def write_resumed_run(folder, unreadable=True):
    """The world-1 file (killed after step 12, set aside), the world-2 run file and, before them, a file that a
    yet earlier resume could not read and set aside (not HDF5 at all)."""
    folder.mkdir(parents=True, exist_ok=True)
    if unreadable:
        (folder / UNREADABLE_ASIDE).write_bytes(b"truncated" * 30)
    old = w.synthetic_run(folder / "resumed.h5", n_steps=12, step_time_s=1.0, flush_every=4, status=None,
                          evals=[(5, 0.30, 1.70), (12, 0.45, 1.55)], cpu_power_w=50.0, nodes=1, gpus_per_node=1,
                          micro_batch=8, **COMMON)
    old.close()  # killed: status "running"
    resume_on_another_grid(folder / "resumed.h5", WORLD1_ASIDE, first_step=11, n_steps=10, step_time_s=0.5,
                           flush_every=5, evals=[(20, 0.40, 1.60)], cpu_power_w=50.0, nodes=2, gpus_per_node=1,
                           micro_batch=4, **COMMON)
    return folder


def resume_on_another_grid(path, aside_name, **run):
    """Resumes the run file at `path` on another grid (w.synthetic_run from run["first_step"]); the file the writer
    sets aside is renamed to `aside_name`, the stamp a test chooses (the writer stamps the current time)."""
    before = set(path.parent.iterdir())
    writer = w.synthetic_run(path, **run)
    aside = [p for p in set(path.parent.iterdir()) - before if ".h5.world" in p.name]
    assert len(aside) == 1, (aside, writer.warning)
    aside[0].rename(path.parent / aside_name)
    return writer


@pytest.fixture(scope="module")
def resumed_dir(tmp_path_factory):
    return write_resumed_run(tmp_path_factory.mktemp("attempts") / "grid")


def test_the_run_joins_the_rows_of_its_attempts_in_step_order(resumed_dir):
    run = read_run(resumed_dir / "resumed.h5")
    assert [a.path.name for a in run.attempts] == [WORLD1_ASIDE, "resumed.h5"]
    assert [(a.world_size, a.nodes) for a in run.attempts] == [(1, 1), (2, 2)]
    assert list(run.steps["step"]) == list(range(1, 21))
    # steps 11 and 12 are the world-2 file's (0.5 s), not the world-1 file's (1 s)
    assert list(run.steps["step_time_s"]) == [1.0] * 10 + [0.5] * 10
    # the world-2 rows count from the run's first start: after the 16 s of the world-1 file
    assert run.steps["wall_time_s"].iloc[9] == pytest.approx(12.0)  # step 10: 10 s + the evaluation after step 5
    assert run.steps["wall_time_s"].iloc[10] == pytest.approx(16.5)  # step 11: 16 + 0.5
    assert list(run.evals["step"]) == [5, 20]  # the evaluation after step 12 was of the rows left out
    assert list(run.evals["wall_time_s"]) == pytest.approx([7.0, 23.0])
    assert [a.steps_joined for a in run.attempts] == [10, 10] and [a.evals_joined for a in run.attempts] == [1, 1]
    assert run.status == "completed" and run.summary_source == "flush,file"
    assert any(f"{WORLD1_ASIDE}: its 2 rows of steps 11-12 and 1 evaluation(s) are left out: a later attempt "
               f"trained from step 11 on again" in note for note in run.notes), run.notes
    assert any(f"{WORLD1_ASIDE}: status 'running': the job of this attempt was killed" in note
               for note in run.notes), run.notes
    assert run.earlier_grids["through_step"] == 10


def test_the_newest_file_holds_the_figures_of_every_grid(resumed_dir):
    s = read_run(resumed_dir / "resumed.h5").summary
    assert s["wall_time_s"] == pytest.approx(WALL_S, rel=1e-12)
    assert s["cost_usd"] == pytest.approx(COST_USD, rel=1e-12)  # 0.1
    assert s["gpu_energy_kwh"] == pytest.approx(GPU_J / 3.6e6, rel=1e-12)
    assert s["cpu_energy_kwh"] == pytest.approx(CPU_J / 3.6e6, rel=1e-12)
    assert s["energy_kwh"] == pytest.approx(ENERGY_KWH, rel=1e-12)
    assert s["co2_kg"] == pytest.approx(ENERGY_KWH * 475 / 1000, rel=1e-12)
    # steps and throughput over the joined rows
    assert s["steps_completed"] == 20 and s["samples_total"] == 160 and s["tokens_total"] == 20 * 320
    assert s["train_time_s"] == pytest.approx(15.0) and s["eval_time_s"] == pytest.approx(4.0)
    assert s["mean_step_time_s"] == pytest.approx(0.75)
    assert s["mean_tokens_per_s"] == pytest.approx((10 * 320 + 10 * 640) / 20)  # 320/s at 1 s, 640/s at 0.5 s
    assert s["mean_mfu"] == pytest.approx(0.4) and s["total_flops"] == pytest.approx(20 * 8e12)
    assert s["peak_memory_bytes"] == 3 * 2 ** 30 + 2 ** 20  # rank 1 of the world-2 file
    assert s["final_rougeL"] == pytest.approx(0.40) and s["best_rougeL"] == pytest.approx(0.40)
    assert s["best_rougeL_step"] == 20  # not the 0.45 after step 12, whose steps were redone


def test_runs_table_and_card_of_a_run_on_two_grids(resumed_dir):
    analysis = analyze(resumed_dir)
    assert len(analysis.table) == 1
    row = analysis.table.iloc[0]
    assert row["run_id"] == "resumed" and row["status"] == "completed" and row["world_size"] == 2
    assert row["attempts"] == 2 and row["attempt"] == 1 and row["attempt_files"] == 2
    assert row["attempt_world_sizes"] == "1,2" and row["attempt_nodes"] == "1,2"
    assert row["attempt_steps"] == "1-10,11-20"
    assert row["attempt_paths"] == f"{WORLD1_ASIDE},resumed.h5"
    assert row["wall_time_s"] == pytest.approx(WALL_S, rel=1e-12)
    assert row["cost_usd"] == pytest.approx(COST_USD, rel=1e-12)
    assert row["node_hours"] == pytest.approx(NODE_HOURS, rel=1e-12)
    assert row["gpu_hours"] == pytest.approx((1 * 16.0 + 2 * 7.0) / 3600, rel=1e-12)
    assert row["cost_low_priority_usd"] == pytest.approx(6 * NODE_HOURS, rel=1e-12)
    assert row["gpu_energy_kj"] == pytest.approx(6.6, rel=1e-12)
    assert row["energy_kwh"] == pytest.approx(ENERGY_KWH, rel=1e-12)
    assert row["samples_per_s"] == pytest.approx(160 / 15, rel=1e-12)
    assert row["tokens_per_s"] == pytest.approx(6400 / 15, rel=1e-12)
    assert row["steps_rows"] == 20 and row["eval_rows"] == 2
    assert row["last_train_loss"] == pytest.approx(4.0 / math.sqrt(20))
    assert row["mean_gpu_power_w"] == pytest.approx(300.0)
    # the run's throughput mixes grids: it has no place in a scaling series
    assert analysis.scaling.empty

    card = card_markdown(row, "rougeL")
    assert ("| Attempts | 2 attempt(s) in 2 run file(s): world size 1 on 1 node(s), steps 1-10; world size 2 on "
            "2 node(s), steps 11-20 (time, cost and energy of every grid); not joined: "
            f"{UNREADABLE_ASIDE} |") in card
    assert "| Run Duration | 23.00s (training 15.00s, evaluation 4.00s) |" in card
    assert ("| Compute Cost (LowPriority/Dedicated) | $0.05/$0.10 (USD) at 6/12 USD per node-hour x 1,2 node(s) "
            "per grid = 0.008333 node-hours |") in card
    assert "| Total GPU Energy Usage | 6.60 (kJ) from nvml_energy_counter |" in card
    assert "| Throughput | 10.67 samples/s, 427 tokens/s |" in card
    assert "| Steps | 20 of 20 (epoch 0.20) |" in card


def test_an_unreadable_file_set_aside_is_reported_and_not_joined(resumed_dir):
    runs, skipped = read_folder(resumed_dir)
    assert [r.run_id for r in runs] == ["resumed"]
    run = runs[0]
    assert [a.path.name for a in run.attempts] == [WORLD1_ASIDE, "resumed.h5"]
    assert [u.path.name for u in run.unjoined] == [UNREADABLE_ASIDE]
    assert [s.path.name for s in skipped] == [UNREADABLE_ASIDE]
    assert "set aside as unreadable by a job that resumed resumed.h5: not joined" in skipped[0].reason
    assert any(note.startswith(f"{UNREADABLE_ASIDE}: set aside as unreadable") for note in run.notes)
    assert analyze(resumed_dir).table.iloc[0]["unjoined_files"] == UNREADABLE_ASIDE
    # without it the figures are the same
    alone = read_run(write_resumed_run(resumed_dir.parent / "alone", unreadable=False) / "resumed.h5")
    assert alone.unjoined == [] and alone.summary["wall_time_s"] == pytest.approx(WALL_S)
    assert alone.summary["cost_usd"] == pytest.approx(run.summary["cost_usd"], rel=1e-12)


def test_attempts_are_ordered_by_the_time_they_were_set_aside(tmp_path):
    # world 2 (attempt 0, steps 1-4) set aside at 09:00, then world 1 (started by the resume: attempt 1, then
    # resumed once more on its grid: attempt 2, steps 4-6) set aside at 10:00, then world 4 (attempt 1, steps
    # 6-7): by name the world-1 file comes first, by time the world-2 file does. Attempts: 1 + 2 + 1 = 4.
    path = tmp_path / "chain.h5"
    common = dict(step_time_s=1.0, status=None, run_id="chain", global_batch=8, micro_batch=2, price=36.0,
                  max_steps=7)
    w.synthetic_run(path, n_steps=4, gpus_per_node=2, **common).close()
    resume_on_another_grid(path, "chain.h5.world2.20261125T090000Z", first_step=4, n_steps=2, gpus_per_node=1,
                           **common).close()
    w.synthetic_run(path, first_step=6, since_step=3, n_steps=1, gpus_per_node=1, **common).close()  # same grid
    resume_on_another_grid(path, "chain.h5.world1.20261125T100000Z", first_step=6, n_steps=2, gpus_per_node=4,
                           **common).close()
    run = read_run(path)
    assert [a.world_size for a in run.attempts] == [2, 1, 4]
    assert list(run.steps["step"]) == list(range(1, 8))
    assert [a.steps_joined for a in run.attempts] == [3, 2, 2]
    # each file's rows count 1 s a step from its own start: 4 + 3 + 2 = 9 s; 36 USD per node-hour, 1 node
    assert run.summary["wall_time_s"] == pytest.approx(9.0) and run.summary["cost_usd"] == pytest.approx(0.09)
    assert run.summary["steps_completed"] == 7 and run.summary["samples_total"] == 7 * 8
    row = analyze(tmp_path).table.iloc[0]
    assert row["attempts"] == 4 and row["attempt"] == 3 and row["attempt_world_sizes"] == "2,1,4"
    assert row["attempt_steps"] == "1-3,4-5,6-7"
    assert row["gpu_hours"] == pytest.approx((2 * 4 + 1 * 3 + 4 * 2) / 3600)


def test_set_aside_files_without_the_run_file_are_still_one_run(tmp_path):
    w.synthetic_run(tmp_path / "lost.h5", n_steps=5, step_time_s=2.0, status="preempted", run_id="lost",
                    price=36.0)
    (tmp_path / "lost.h5").rename(tmp_path / "lost.h5.world1.20261125T180102Z")
    runs, skipped = read_folder(tmp_path)
    assert [r.run_id for r in runs] == ["lost"] and skipped == []
    run = runs[0]
    assert run.path.name == "lost.h5.world1.20261125T180102Z" and run.status == "preempted"
    assert run.summary["wall_time_s"] == pytest.approx(10.0) and run.summary["cost_usd"] == pytest.approx(0.1)
    assert any("there is no lost.h5: the newest attempt set aside stands for the run file" in n for n in run.notes)

    # only an unreadable file: no run, the file is listed with the reason
    (tmp_path / "lost.h5.world1.20261125T180102Z").unlink()
    (tmp_path / "gone.h5.unreadable.20261125T180102Z").write_bytes(b"x" * 100)
    runs, skipped = read_folder(tmp_path)
    assert runs == [] and [s.path.name for s in skipped] == ["gone.h5.unreadable.20261125T180102Z"]
    assert "no run file gone.h5 beside it and no readable attempt set aside" in skipped[0].reason


def test_a_run_that_never_changed_grid_is_one_attempt(study_dir):
    row = analyze(study_dir).table.set_index("run_id").loc["none-w8"]
    assert row["attempts"] == 1 and row["attempt"] == 0 and row["attempt_files"] == 1
    assert row["attempt_world_sizes"] == "8" and row["attempt_nodes"] == "2" and row["attempt_steps"] == "1-10"
    assert row["unjoined_files"] == "" and np.isclose(row["node_hours"], 2 * 20 / 3600)


def test_the_command_notes_the_joined_run_and_warns_of_the_unreadable_file(resumed_dir, tmp_path):
    from test_cli import analyze as analyze_command  # the command's main function, with its output and exit status
    done = analyze_command(resumed_dir, "--out", tmp_path / "report")
    assert done.returncode == 0, done.stderr
    assert (f"t5scale-analyze: warning: skipped {resumed_dir / UNREADABLE_ASIDE}: set aside as unreadable by a job "
            f"that resumed resumed.h5: not joined") in done.stderr
    assert (f"t5scale-analyze: note: resumed ({resumed_dir / 'resumed.h5'}) joins the run files of its attempts on "
            f"2 grids: {WORLD1_ASIDE} (world size 1), resumed.h5 (world size 2)") in done.stderr
    assert "| Attempts | 2 attempt(s) in 2 run file(s)" in done.stdout
    report = (tmp_path / "report" / "report.html").read_text()
    assert ("Left out, resumed on another world size (their throughput mixes grids): resumed (world sizes 1,2)."
            in report)
    assert UNREADABLE_ASIDE in report  # in the skipped files and the run's notes


def test_a_later_attempt_without_rows_counts_nothing_and_cuts_at_its_checkpoint(tmp_path):
    # world 1: steps 1-6 of 1 s (6 s, 36 USD per node-hour: 0.06 USD); world 2, resumed from step 4, killed
    # before its first flush: no rows. The run holds steps 1-4; its time is the world-1 file's. Read an hour later,
    # the silent file of world 2 is incomplete.
    w.synthetic_run(tmp_path / "r.h5", n_steps=6, step_time_s=1.0, run_id="r", price=36.0)
    w.RunWriter(tmp_path / "r.h5", w.root_attributes(run_id="r", gpus_per_node=2, price=36.0),
                resume_through_step=4).close()
    run = read_run(tmp_path / "r.h5", now=(tmp_path / "r.h5").stat().st_mtime + 3600)
    assert list(run.steps["step"]) == [1, 2, 3, 4] and run.status == "incomplete"
    assert run.summary["wall_time_s"] == pytest.approx(6.0) and run.summary["cost_usd"] == pytest.approx(0.06)
    assert run.summary["gpu_energy_kwh"] == pytest.approx(300 * 6 / 3.6e6)
    assert run.summary["steps_completed"] == 4
    row = analyze(tmp_path).table.iloc[0]
    assert row["node_hours"] == pytest.approx(6.0 / 3600) and row["attempt_steps"] == "1-4,-"


def test_a_run_file_after_an_unreadable_one_is_one_file_and_two_attempts(tmp_path):
    # the resume could not read the old file: it set it aside and started anew (attempt 1) from step 10
    (tmp_path / "r.h5").write_bytes(b"x" * 100)
    writer = w.synthetic_run(tmp_path / "r.h5", first_step=11, n_steps=5, step_time_s=1.0, run_id="r")
    assert "cannot be read" in writer.warning
    [aside] = tmp_path.glob("r.h5.unreadable.*")
    aside.rename(tmp_path / "r.h5.unreadable.20261125T180102Z")
    analysis = analyze(tmp_path)
    row = analysis.table.iloc[0]
    assert row["attempts"] == 2 and row["attempt_files"] == 1 and row["wall_time_s"] == pytest.approx(5.0)
    assert row["unjoined_files"] == "r.h5.unreadable.20261125T180102Z"
    assert [s.path.name for s in analysis.skipped] == ["r.h5.unreadable.20261125T180102Z"]
    assert "| Attempts | 2 attempt(s) in 1 run file(s): world size 1 on 1 node(s), steps 11-15; not joined: " \
           "r.h5.unreadable.20261125T180102Z |" in card_markdown(row, None)


def test_the_card_numbers_the_attempt_as_the_runs_table_counts_it(tmp_path):
    # steps 1-6, killed; a second attempt on the same grid from the checkpoint of step 4 (the file's attribute
    # `attempt` 1, counted from 0), killed after step 8: the runs table says 2 attempts, and so does the card
    path = tmp_path / "r.h5"
    w.synthetic_run(path, n_steps=6, step_time_s=1.0, run_id="r", status=None).close()
    w.synthetic_run(path, first_step=5, n_steps=4, step_time_s=1.0, run_id="r", status=None).close()
    row = analyze(tmp_path).table.iloc[0]
    assert row["attempts"] == 2 and row["attempt_files"] == 1
    assert "| Status | running (attempt 2) |" in card_markdown(row, None)
    # the third attempt, on another grid from the checkpoint of step 8, to the end: two files, attempt 3
    resume_on_another_grid(path, "r.h5.world1.20261125T090000Z", first_step=9, n_steps=2, step_time_s=1.0,
                           run_id="r", gpus_per_node=2)
    row = analyze(tmp_path).table.iloc[0]
    assert row["attempts"] == 3 and row["attempt_files"] == 2
    assert "| Status | completed (attempt 3) |" in card_markdown(row, None)
