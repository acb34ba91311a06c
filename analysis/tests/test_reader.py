"""The run-file reader on finished files, odd files and damaged tables."""

import json
import math

import h5py
import numpy as np
import pytest

import runfile_writer as w
from t5scale_analyze import read_folder, read_run
from t5scale_analyze import schema
from t5scale_analyze.runfile import RUNNING_WITHIN_S
from t5scale_analyze.schema import summary_figures


def test_reads_attributes_tables_and_summary_of_a_completed_run(study_dir):
    run = read_run(study_dir / "none-w8.h5")
    assert run.status == "completed" and run.summary_source == "file" and run.notes == []
    a = run.attrs
    assert a["run_id"] == "none-w8" and a["study"] == "scale" and a["slurm_array_task_id"] == ""
    assert isinstance(a["nodes"], int) and a["nodes"] == 2 and a["world_size"] == 8
    assert isinstance(a["base_lr"], float) and a["base_lr"] == 1e-3
    assert run.config["train"]["global_batch"] == 64 and run.config["cost"]["low_priority_price_per_node_hour_usd"] == 3.0
    assert list(run.steps["step"]) == list(range(1, 11))
    assert run.rank_steps["gpu_energy_j"].shape == (10, 8)
    assert list(run.evals["step"]) == [5, 10]
    # rougeL 0.31 after step 5, 0.30 after step 10: best is not final
    assert run.summary["final_rougeL"] == pytest.approx(0.30)
    assert run.summary["best_rougeL"] == pytest.approx(0.31) and run.summary["best_rougeL_step"] == 5
    assert run.summary["best_loss"] == pytest.approx(1.69) and run.summary["best_loss_step"] == 5
    # 10 steps of 1.6 s, two evaluations of 2 s
    assert run.summary["wall_time_s"] == pytest.approx(20.0)
    assert run.summary["train_time_s"] == pytest.approx(16.0)


def test_the_summary_is_the_files_as_the_writer_computed_it(study_dir):
    # The reader computes no figure: each one of the schema is the file's /summary attribute, as it is.
    runs, skipped = read_folder(study_dir)
    assert len(runs) == 7 and skipped == []
    for run in runs:
        with h5py.File(run.path, "r") as f:
            written = {k: w_decode(v) for k, v in f["summary"].attrs.items()}
        assert sorted(written) == sorted(f["name"] for f in summary_figures())
        for key, value in written.items():
            if isinstance(value, float) and math.isnan(value):
                assert math.isnan(run.summary[key]), (run.run_id, key)
            else:
                assert run.summary[key] == value, (run.run_id, key)


def w_decode(value):
    return value.decode() if isinstance(value, bytes) else value.item() if hasattr(value, "item") else value


def test_files_that_are_not_run_files_are_skipped_with_the_reason(tmp_path):
    with h5py.File(tmp_path / "tokens.h5", "w") as f:
        w.set_attr(f, "format", "t5scale-tokenized-dataset")
        w.set_attr(f, "schema_version", 1)
    with h5py.File(tmp_path / "plain.h5", "w") as f:
        f.create_dataset("x", data=np.arange(3))
    (tmp_path / "garbage.h5").write_bytes(b"not hdf5 at all" * 20)
    w.synthetic_run(tmp_path / "future.h5", n_steps=3, step_time_s=1.0, run_id="future")
    with h5py.File(tmp_path / "future.h5", "r+") as f:
        w.set_attr(f, "schema_version", 2)
    (tmp_path / "sub").mkdir()  # run files are found in subfolders too
    w.synthetic_run(tmp_path / "sub" / "good.h5", n_steps=3, step_time_s=1.0, run_id="good")
    (tmp_path / "good.h5.tmp.123").write_bytes(b"half-written")  # a writer's temporary file: not *.h5

    runs, skipped = read_folder(tmp_path)
    assert [r.run_id for r in runs] == ["good"]
    reasons = {s.path.name: s.reason for s in skipped}
    assert set(reasons) == {"tokens.h5", "plain.h5", "garbage.h5", "future.h5"}
    assert "'t5scale-tokenized-dataset', not 't5scale-run'" in reasons["tokens.h5"]
    assert "no 'format' attribute" in reasons["plain.h5"]
    assert "no HDF5 superblock in its 300 bytes" in reasons["garbage.h5"]
    assert "schema_version 2" in reasons["future.h5"]


def test_a_truncated_run_file_is_skipped_at_once_and_a_longer_one_read(tmp_path):
    """Opened with SWMR, a run file cut short makes HDF5 retry for minutes; the superblock's stored end of file
    against the file's size tells it at once. A file longer than its stored end (a SWMR writer's data ahead of its
    next flush) is read."""
    import time
    w.synthetic_run(tmp_path / "good.h5", n_steps=30, step_time_s=1.0, run_id="good")
    whole = (tmp_path / "good.h5").read_bytes()
    (tmp_path / "half.h5").write_bytes(whole[:len(whole) // 2])
    (tmp_path / "cut100.h5").write_bytes(whole[:-100])
    (tmp_path / "longer.h5").write_bytes(whole + b"\0" * 4096)
    start = time.monotonic()
    runs, skipped = read_folder(tmp_path)
    assert time.monotonic() - start < 10
    assert sorted(r.path.name for r in runs) == ["good.h5", "longer.h5"]
    reasons = {s.path.name: s.reason for s in skipped}
    assert reasons == {
        "half.h5": f"truncated: {len(whole) // 2} bytes, but its superblock says the file ends at byte {len(whole)}",
        "cut100.h5": f"truncated: {len(whole) - 100} bytes, but its superblock says the file ends at byte {len(whole)}"}


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_the_superblock_check_counts_the_end_of_file_from_the_first_byte(tmp_path, libver):
    """Superblock versions 0 and 3, after a user block: the stored end of file counts from the file's first byte
    (src/core/hdf5_superblock.cpp reads it the same way; tests/core/test_hdf5_superblock.cpp)."""
    from t5scale_analyze.runfile import hdf5_damage
    path = tmp_path / "user_block.h5"
    with h5py.File(path, "w", userblock_size=512, libver=libver) as f:
        f.create_dataset("values", data=np.arange(1000.0))
    whole = path.read_bytes()
    assert hdf5_damage(path) is None
    (tmp_path / "longer.h5").write_bytes(whole + bytes(4096))
    assert hdf5_damage(tmp_path / "longer.h5") is None
    for cut in (len(whole) - 1, len(whole) // 2, 600):
        (tmp_path / "cut.h5").write_bytes(whole[:cut])
        assert hdf5_damage(tmp_path / "cut.h5") == \
            f"truncated: {cut} bytes, but its superblock says the file ends at byte {len(whole)}"


def test_watch_names_each_damaged_file_once_and_follows_the_others(tmp_path):
    """A run file cut short (a copy interrupted, a full disk) and a file that is no HDF5 beside a good run: watch
    answers at once, names each skipped file with its reason once (not at every refresh), and reports the good run."""
    import io
    import time
    from t5scale_analyze.watch import watch
    w.synthetic_run(tmp_path / "good.h5", n_steps=6, step_time_s=1.0, run_id="good")
    whole = (tmp_path / "good.h5").read_bytes()
    (tmp_path / "half.h5").write_bytes(whole[:len(whole) // 2])
    (tmp_path / "x.h5").write_bytes(b"not an HDF5 file\n" * 8)
    out = io.StringIO()
    start = time.monotonic()
    assert watch(tmp_path, tmp_path / "report", "auto", 0.01, out=out, max_refreshes=3) == 0
    assert time.monotonic() - start < 30
    said = out.getvalue()
    half = f"skipped {tmp_path / 'half.h5'}: truncated: {len(whole) // 2} bytes, but its superblock says the file " \
           f"ends at byte {len(whole)}"
    assert said.count(half) == 1, said
    assert said.count(f"skipped {tmp_path / 'x.h5'}: no HDF5 superblock in its 136 bytes") == 1, said
    assert "1 run(s), 1 ended" in said and "every run has ended" in said


def test_flushed_figures_and_a_final_status_keep_that_status(tmp_path):
    writer = w.synthetic_run(tmp_path / "r.h5", n_steps=4, step_time_s=1.0, status=None, run_id="r")
    writer.close()
    with h5py.File(tmp_path / "r.h5", "r+") as f:
        w.set_attr(f, "status", "failed")
    run = read_run(tmp_path / "r.h5")
    assert run.status == "failed" and run.summary_source == "flush"
    assert run.summary["steps_completed"] == 4 and run.summary["wall_time_s"] == pytest.approx(4.0)


def _running_file(path, n_steps=4):
    """A file whose writer went away without finishing it: it still says "running"."""
    writer = w.synthetic_run(path, n_steps=n_steps, step_time_s=1.0, status=None, run_id="r")
    writer.close()


def test_a_running_file_with_a_failure_note_is_failed_with_its_error(tmp_path):
    _running_file(tmp_path / "r.h5")
    run = read_run(tmp_path / "r.h5")
    assert run.status == "running"
    (tmp_path / "r.failed.json").write_text(json.dumps(
        {"rank": 3, "error": "token id 53 is outside the vocabulary [0, 48)", "step": 4, "host": "node0",
         "time_utc": "2025-01-01T00:01:00Z"}))
    run = read_run(tmp_path / "r.h5")
    assert run.status == "failed" and run.summary_source == "flush"
    assert run.summary["error"] == "token id 53 is outside the vocabulary [0, 48)" and run.summary["error_step"] == 4
    assert any(note.startswith("rank 3 failed after step 4: token id 53") for note in run.notes)
    assert run.summary["steps_completed"] == 4


def test_a_failure_recorded_by_rank_0_is_read_from_the_file(tmp_path):
    _running_file(tmp_path / "r.h5")
    with h5py.File(tmp_path / "r.h5", "r+") as f:
        w.set_attr(f, "status", "failed")
        w.set_attr(f, "error", "all_reduce(sum) on the world group (rank 0 of 2) timed out after 5 s")
        w.set_attr(f, "error_step", 3)
    run = read_run(tmp_path / "r.h5")
    assert run.status == "failed" and run.summary["error_step"] == 3
    assert run.summary["error"].startswith("all_reduce(sum)")


def test_a_running_file_is_running_while_written_incomplete_when_silent_and_stale_after_two_hours(tmp_path):
    _running_file(tmp_path / "r.h5")  # 4 steps of 1 s, flushed every 10 steps: RUNNING_WITHIN_S
    written = (tmp_path / "r.h5").stat().st_mtime
    run = read_run(tmp_path / "r.h5", now=written + 60)
    assert run.status == "running" and any("written 60 s ago, within its flush interval" in n for n in run.notes)
    assert read_run(tmp_path / "r.h5", now=written + RUNNING_WITHIN_S - 1).status == "running"
    run = read_run(tmp_path / "r.h5", now=written + RUNNING_WITHIN_S + 60)
    assert run.status == "incomplete"
    assert any("nothing written for 11 min, longer than its flushes take (10 min)" in n for n in run.notes), run.notes
    run = read_run(tmp_path / "r.h5", now=written + 3 * 3600)
    assert run.status == "stale" and any("nothing written for 3.0 h" in note for note in run.notes)


def test_a_slow_run_reads_running_for_three_of_its_flush_intervals(tmp_path):
    # steps of 100 s flushed every 10 steps (the config's default), evaluations of 2 s: a flush every 1002 s, so the
    # file may be silent 3006 s (50 min) and still be written by its job
    writer = w.synthetic_run(tmp_path / "r.h5", n_steps=4, step_time_s=100.0, evals=[(2, 0.3, 1.7)], status=None,
                             run_id="r")
    writer.close()
    written = (tmp_path / "r.h5").stat().st_mtime
    assert read_run(tmp_path / "r.h5", now=written + 3000).status == "running"
    assert read_run(tmp_path / "r.h5", now=written + 3020).status == "incomplete"


def _write_raw(path, columns: dict, rank_columns: dict, **attributes):
    """A run file whose /steps datasets are given as they are (to damage them on purpose), without /summary."""
    attrs = {"format": schema.FORMAT, "schema_version": schema.SCHEMA_VERSION, "status": "running",
             **w.root_attributes(run_id="raw", **attributes)}
    with h5py.File(path, "w", libver=("v110", "latest")) as f:
        for name, value in attrs.items():
            w.set_attr(f, name, value)
        steps = f.create_group("steps")
        for name, data in {**columns, **rank_columns}.items():
            steps.create_dataset(name, data=data, maxshape=(None,) + np.shape(data)[1:])
        f.create_group("eval").create_dataset("step", data=np.zeros(0, dtype=np.int64), maxshape=(None,))


def test_datasets_of_different_lengths_are_read_to_the_rows_they_all_hold(tmp_path):
    # killed between extending step_time_s and the rest: step_time_s has a 4th row
    _write_raw(tmp_path / "r.h5",
               {"step": np.array([1, 2, 3]), "wall_time_s": np.array([1.0, 2.0, 3.0]),
                "step_time_s": np.array([1.0, 1.0, 1.0, 1.0]), "samples": np.array([8, 8, 8])},
               {"gpu_energy_j": np.array([[10.0], [20.0], [30.0], [40.0]])})
    run = read_run(tmp_path / "r.h5")
    assert len(run.steps) == 3 and run.rank_steps["gpu_energy_j"].shape == (3, 1)
    assert list(run.steps["step_time_s"]) == [1.0, 1.0, 1.0]
    assert any("differ in length (3..4 rows)" in note for note in run.notes)
    # no /summary: the figures are unknown, and said so
    assert run.summary_source == "none" and math.isnan(run.summary["train_time_s"])
    assert any("no /summary: the figures of this file are unknown" in note for note in run.notes)


def test_rows_extended_but_never_written_are_dropped(tmp_path):
    # the extent reached the file, the data did not: the trainer's fill values (-1, NaN) after step 3
    nan = np.nan
    _write_raw(tmp_path / "r.h5",
               {"step": np.array([1, 2, 3, -1, -1]), "wall_time_s": np.array([1.0, 2.0, 3.0, nan, nan]),
                "step_time_s": np.array([1.0, 1.0, 1.0, nan, nan]), "samples": np.array([8, 8, 8, -1, -1])},
               {"gpu_energy_j": np.array([[10.0], [20.0], [30.0], [nan], [nan]])})
    run = read_run(tmp_path / "r.h5")
    assert list(run.steps["step"]) == [1, 2, 3] and list(run.steps["samples"]) == [8, 8, 8]
    assert run.rank_steps["gpu_energy_j"].tolist() == [[10.0], [20.0], [30.0]]
    assert run.status == "running"
    assert any("2 trailing rows hold no data" in note for note in run.notes)

    # killed after extending the first row and before writing it: no step at all
    _write_raw(tmp_path / "r.h5", {"step": np.array([-1]), "wall_time_s": np.array([nan]),
                                   "step_time_s": np.array([nan]), "samples": np.array([-1])},
               {"gpu_energy_j": np.array([[nan]])})
    run = read_run(tmp_path / "r.h5")
    assert len(run.steps) == 0 and run.status == "running"


def _write_steps(path, columns: dict, **attributes):
    """A finished run file of the given /steps columns (the rest at the writer's defaults), by t5scale's writer."""
    writer = w.RunWriter(path, w.root_attributes(run_id="r", **attributes))
    writer.append_steps(columns)
    writer.finish("completed")


def test_energy_counts_gpus_per_rank_and_cpus_per_node(tmp_path):
    # 2 nodes x 2 GPUs. GPU counters at the newest row: 100, 200, 300, 400 J -> 1000 J. CPU counters are the
    # node's: node 0 read by rank 1 only (rank 0 NaN) 50 J, node 1 by ranks 2 and 3 (70 J each) -> 120 J.
    # PUE 2, 500 g/kWh: energy = 1120 / 3.6e6 x 2 kWh.
    nan = np.nan
    _write_steps(tmp_path / "r.h5",
                 {"step": np.array([1, 2]), "wall_time_s": np.array([1.0, 2.0]), "step_time_s": np.array([1.0, 1.0]),
                  "samples": np.array([8, 8]),
                  "gpu_energy_j": np.array([[50.0, 100.0, 150.0, 200.0], [100.0, 200.0, 300.0, 400.0]]),
                  "cpu_energy_j": np.array([[nan, 25.0, 35.0, 35.0], [nan, 50.0, 70.0, 70.0]])},
                 nodes=2, gpus_per_node=2, pue=2.0, carbon=500.0, energy_source_cpu="rapl", price=9.0)
    s = read_run(tmp_path / "r.h5").summary
    assert s["gpu_energy_kwh"] == pytest.approx(1000 / 3.6e6)
    assert s["cpu_energy_kwh"] == pytest.approx(120 / 3.6e6)
    assert s["energy_kwh"] == pytest.approx(1120 / 3.6e6 * 2)
    assert s["co2_kg"] == pytest.approx(1120 / 3.6e6 * 2 * 500 / 1000)
    assert s["cost_usd"] == pytest.approx(9.0 * 2 * 2.0 / 3600)


def test_a_source_that_is_none_counts_nothing(tmp_path):
    nan = np.nan
    _write_steps(tmp_path / "r.h5",
                 {"step": np.array([1]), "wall_time_s": np.array([1.0]), "step_time_s": np.array([1.0]),
                  "samples": np.array([8]), "gpu_energy_j": np.array([[nan]]), "cpu_energy_j": np.array([[36.0]])},
                 energy_source_gpu="none", energy_source_cpu="rapl", pue=1.0)
    s = read_run(tmp_path / "r.h5").summary
    assert math.isnan(s["gpu_energy_kwh"]) and s["energy_kwh"] == pytest.approx(36.0 / 3.6e6)
    _write_steps(tmp_path / "r2.h5",
                 {"step": np.array([1]), "wall_time_s": np.array([1.0]), "step_time_s": np.array([1.0]),
                  "samples": np.array([8]), "gpu_energy_j": np.array([[nan]]), "cpu_energy_j": np.array([[nan]])},
                 energy_source_gpu="none", energy_source_cpu="none")
    s = read_run(tmp_path / "r2.h5").summary
    assert math.isnan(s["energy_kwh"]) and math.isnan(s["co2_kg"]) and math.isnan(s["cost_usd"])  # no price
