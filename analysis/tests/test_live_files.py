"""Run files of jobs still writing them (SWMR writer open in another process) and of jobs killed with SIGKILL
after their flushes. The run is the one in swmr_writer_process.py; the values below are worked out by hand."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from t5scale_analyze import read_folder, read_run
from t5scale_analyze.runfile import RUNNING_WITHIN_S

WRITER = Path(__file__).resolve().parent / "swmr_writer_process.py"


def start_writer(path, *args):
    process = subprocess.Popen([sys.executable, str(WRITER), str(path), *args], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, cwd=WRITER.parent)
    return process


def expect_line(process, expected):
    line = process.stdout.readline().strip()
    assert line == expected, f"writer said {line!r}, expected {expected!r} (exit {process.poll()})"


def check_first_20_flushed_steps(run, status="running"):
    """20 steps of 0.5 s, 16 samples, 640 tokens each; an evaluation of 1 s after step 10; 2 GPUs at 200 W and
    the node's CPUs at 40 W over the training time; 1 node at 8 USD/hour, PUE 1.5, 400 g/kWh."""
    s = run.summary
    assert run.status == status and run.summary_source == "flush"
    assert list(run.steps["step"]) == list(range(1, 21))
    assert s["steps_completed"] == 20
    assert s["wall_time_s"] == pytest.approx(11.0)  # 20 * 0.5 + 1
    assert s["train_time_s"] == pytest.approx(10.0)
    assert s["eval_time_s"] == pytest.approx(1.0)
    assert s["samples_total"] == 320 and s["tokens_total"] == 12800
    assert s["gpu_energy_kwh"] == pytest.approx(4000 / 3.6e6)  # 2 x 200 W x 10 s
    assert s["cpu_energy_kwh"] == pytest.approx(400 / 3.6e6)  # 40 W x 10 s, counted once for the node
    assert s["energy_kwh"] == pytest.approx(4400 / 3.6e6 * 1.5)  # 0.0018333
    assert s["co2_kg"] == pytest.approx(4400 / 3.6e6 * 1.5 * 400 / 1000)  # 0.00073333
    assert s["cost_usd"] == pytest.approx(8 * 1 * 11.0 / 3600)  # 0.024444
    assert s["mean_step_time_s"] == pytest.approx(0.5)
    assert s["peak_memory_bytes"] == 3 * 2 ** 30 + 2 ** 20  # rank 1's peak
    assert s["total_flops"] == pytest.approx(20 * 16e12)
    assert s["final_rougeL"] == pytest.approx(0.3) and s["best_rougeL_step"] == 10
    assert s["final_loss"] == pytest.approx(2.0)
    note = "its job is writing it" if status == "running" else "the job was killed or is stuck"
    assert any(note in n for n in run.notes), run.notes


def test_a_file_still_being_written_is_read_up_to_its_last_flush(tmp_path):
    path = tmp_path / "live-run.h5"
    writer = start_writer(path, "hold")
    try:
        expect_line(writer, "flushed 20")
        check_first_20_flushed_steps(read_run(path))  # the writer still holds the file in SWMR mode
        runs, skipped = read_folder(tmp_path)
        assert [r.run_id for r in runs] == ["live-run"] and skipped == []

        writer.stdin.write("finish\n")
        writer.stdin.flush()
        expect_line(writer, "finished")
        assert writer.wait(timeout=60) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
    run = read_run(path)
    assert run.status == "completed" and run.summary_source == "file" and run.notes == []
    assert run.summary["steps_completed"] == 40
    assert run.summary["wall_time_s"] == pytest.approx(22.0)  # 40 * 0.5 + 2 evaluations of 1 s
    assert run.summary["cost_usd"] == pytest.approx(8 * 22.0 / 3600)
    assert run.summary["best_rougeL"] == pytest.approx(0.5) and run.summary["best_rougeL_step"] == 40


def kill_after_ready(path, extra_rows):
    writer = start_writer(path, "kill", str(extra_rows))
    try:
        expect_line(writer, "ready")
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=60)
    assert writer.returncode == -signal.SIGKILL


def test_a_file_whose_writer_was_killed_after_its_flushes_holds_every_flushed_step(tmp_path):
    path = tmp_path / "live-run.h5"
    kill_after_ready(path, 0)
    # read at once, the file cannot tell its job was killed: it was written within its flush interval
    check_first_20_flushed_steps(read_run(path), "running")
    # silent for longer than its flushes take: incomplete
    check_first_20_flushed_steps(read_run(path, now=path.stat().st_mtime + RUNNING_WITHIN_S + 60), "incomplete")


def test_a_file_killed_with_unflushed_rows_reads_a_consistent_prefix(tmp_path):
    # 300 rows appended after the last flush (more than a 256-row chunk): some may have reached the file, some
    # not; whatever did, the reader returns steps 1..n with every flushed step in it.
    path = tmp_path / "live-run.h5"
    kill_after_ready(path, 300)
    run = read_run(path)
    n = len(run.steps)
    assert 20 <= n <= 320
    assert np.array_equal(run.steps["step"].to_numpy(), np.arange(1, n + 1))
    assert run.rank_steps["gpu_energy_j"].shape == (n, 2)
    assert run.status == "running" and run.summary["steps_completed"] == n


def test_a_file_locked_while_its_job_writes_the_summary_is_skipped_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.delenv("HDF5_USE_FILE_LOCKING", raising=False)  # HDF5's default: files are locked
    path = tmp_path / "live-run.h5"
    writer = start_writer(path, "end")
    try:
        expect_line(writer, "ending")
        runs, skipped = read_folder(tmp_path)
        assert runs == [] and [s.path for s in skipped] == [path]
        assert "locked by a process writing it without SWMR" in skipped[0].reason
        writer.stdin.write("finish\n")
        writer.stdin.flush()
        expect_line(writer, "finished")
        assert writer.wait(timeout=60) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
    run = read_run(path)
    assert run.status == "completed" and run.summary["steps_completed"] == 20


def test_watch_follows_a_running_job_and_stops_when_it_has_ended(tmp_path):
    """`t5scale-analyze watch` on a folder whose job is writing its run file: a refreshed report at step 20 of
    40 while the writer holds the file, the final one once it has finished, and an exit of its own."""
    path = tmp_path / "results" / "live-run.h5"
    path.parent.mkdir()
    out = tmp_path / "report"
    writer = start_writer(path, "hold")
    env = dict(os.environ, PYTHONPATH=str(WRITER.parents[1]), MPLBACKEND="Agg")
    watcher = subprocess.Popen([sys.executable, "-m", "t5scale_analyze", "watch", str(path.parent), "--out", str(out),
                                "--every", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        expect_line(writer, "flushed 20")
        seen = []
        for line in watcher.stdout:  # refreshes until the watcher has seen the 20 flushed steps
            seen.append(line)
            if "live-run" in line and "step 20/40" in line:
                break
        # the job is writing the file: "running", not "incomplete"
        assert "  running  " in seen[-1] and "rougeL 0.3 (step 10)" in seen[-1], "".join(seen)
        assert watcher.poll() is None  # still following
        assert (out / "report.html").is_file()
        writer.stdin.write("finish\n")
        writer.stdin.flush()
        expect_line(writer, "finished")
        rest = watcher.communicate(timeout=120)[0]
        assert watcher.returncode == 0, rest
        assert "every run has ended" in rest and "completed" in rest and "step 40/40" in rest, rest
    finally:
        for process in (writer, watcher):
            if process.poll() is None:
                process.kill()
    table = pd.read_csv(out / "runs.csv")
    assert list(table["steps_completed"]) == [40] and list(table["status"]) == ["completed"]


def test_watch_waits_for_run_files_and_names_a_bad_folder(tmp_path, capsys):
    from t5scale_analyze.cli import main
    assert main(["watch", str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err
    assert main(["watch", str(tmp_path), "--every", "0"]) == 2
    assert "--every" in capsys.readouterr().err
    assert main(["watch", str(tmp_path), "--every", "0.01", "--refreshes", "3"]) == 0
    said = capsys.readouterr().out
    assert said.count("no run files") == 1 and not (tmp_path / "report").exists()
