"""The t5scale-analyze command (its main function; through its bash wrapper for the full report and the choice of
Python): outputs, the self-contained report, exit codes."""

import contextlib
import html.parser
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pandas as pd
import pytest

import runfile_writer as w
from t5scale_analyze.cli import main

COMMAND = Path(__file__).resolve().parents[1] / "t5scale-analyze"


def run_command(*args, env_python=sys.executable):
    """The command itself, through its bash wrapper, in a process of its own."""
    env = dict(os.environ, T5SCALE_PYTHON=env_python)
    return subprocess.run([str(COMMAND), *map(str, args)], capture_output=True, text=True, env=env, timeout=300)


def analyze(*args):
    """The command's main function in this process, with what it prints and its exit status as a process's: each
    process would import pandas, h5py and matplotlib again (about a CPU-second), for the same code. The report of
    the `results` fixture, the wrapper's choice of Python (test_wrapper_finds_the_python_from_the_cache_folder) and
    tests/analysis/check_entry_point.sh (the installed command) run the command in a process of its own."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            returncode = main([str(a) for a in args])
        except SystemExit as e:  # argparse's refusals
            returncode = e.code if isinstance(e.code, int) else 2
    return subprocess.CompletedProcess(["t5scale-analyze", *map(str, args)], returncode, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def results(study_dir, tmp_path_factory):
    """The "scale" study (two of its runs with generations files), a killed run of another study, and two files that
    are not run files."""
    folder = tmp_path_factory.mktemp("cli") / "results"
    shutil.copytree(study_dir, folder / "scale")
    for run_id, text in (("sqrt-w1", "best run"), ("none-w8", "worse run")):
        with open(folder / "scale" / f"{run_id}.eval.jsonl", "w") as f:
            for step in (40, 80):
                for index in range(8):
                    f.write(json.dumps({"step": step, "index": index, "source": "summarize: " + "word " * 100,
                                        "prediction": f"{text} {step}/{index}", "reference": f"ref <{index}>"}) + "\n")
    live = folder / "live"
    live.mkdir()
    writer = w.synthetic_run(live / "killed.h5", n_steps=12, step_time_s=0.5, status=None, run_id="killed",
                             study="live", nodes=1, gpus_per_node=2, global_batch=16, price=8.0)
    writer.close()  # as a killed job leaves it: status "running", no /summary
    an_hour_ago = time.time() - 3600  # and nothing has written it since: incomplete (not running, not yet stale)
    os.utime(live / "killed.h5", (an_hour_ago, an_hour_ago))
    with h5py.File(folder / "tokens.h5", "w") as f:
        w.set_attr(f, "format", "t5scale-tokenized-dataset")
    return folder


@pytest.fixture(scope="module")
def report_run(results):
    out = results.parent / "out"
    return run_command(results, "--out", out), out


def test_writes_tables_cards_figures_and_report(report_run):
    done, out = report_run
    assert done.returncode == 0, done.stderr
    for name in ("runs.csv", "runs.parquet", "scaling.csv", "lr_scaling.csv", "pareto.csv", "cards.md", "report.html"):
        assert (out / name).is_file(), name
    for stem in ("scaling_scale_gpus", "scaling_scale_nodes", "lr_scaling_scale", "loss_curves_scale", "pareto_scale",
                 "steps_scale", "loss_curves_live", "steps_live"):
        for suffix in (".png", ".svg"):
            figure = out / "plots" / (stem + suffix)
            assert figure.is_file() and figure.stat().st_size > 1000, figure
    # the killed run of study "live" is one run on one grid with one batch and no completed evaluation: nothing to
    # plot against GPUs, batch or cost
    for stem in ("scaling_live_gpus", "lr_scaling_live", "pareto_live"):
        assert not (out / "plots" / (stem + ".png")).exists(), stem
    assert (out / "plots" / "scaling_scale_gpus.png").read_bytes().startswith(b"\x89PNG")
    assert b"<svg" in (out / "plots" / "scaling_scale_gpus.svg").read_bytes()[:2000]


def test_prints_the_cards_the_report_path_and_the_skipped_file(report_run, results):
    done, out = report_run
    assert "| Compute Cost (LowPriority/Dedicated) |" in done.stdout
    for run_id in ("none-w1", "sqrt-w8", "killed"):
        assert f"### {run_id}" in done.stdout
    assert f"report: {out / 'report.html'}" in done.stdout
    assert f"skipped {results / 'tokens.h5'}: format attribute is 't5scale-tokenized-dataset'" in done.stderr
    assert "killed" in done.stderr and "is incomplete" in done.stderr


def test_runs_table_csv_and_parquet_agree(report_run):
    _, out = report_run
    csv = pd.read_csv(out / "runs.csv")
    parquet = pd.read_parquet(out / "runs.parquet")
    assert list(csv.columns) == list(parquet.columns)
    assert len(csv) == len(parquet) == 8
    assert dict(zip(parquet["run_id"], parquet["status"]))["killed"] == "incomplete"
    assert list(parquet["cost_usd"]) == pytest.approx(list(csv["cost_usd"]))
    assert "cfg.train.batch_mode" in parquet


def test_report_is_self_contained(report_run):
    _, out = report_run
    page = (out / "report.html").read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//|file:)""", page)
    assert "@import" not in page and "url(" not in page and "<script" not in page
    images = re.findall(r'<img [^>]*src="([^"]*)"', page)
    assert len(images) >= 7 and all(src.startswith("data:image/png;base64,") for src in images)
    for heading in ("Training curves and steps", "Scaling", "Learning-rate scaling", "Cost/quality Pareto front",
                    "Generations", "Resource cards", "Skipped files"):
        assert f">{heading}</h2>" in page
    assert "tokens.h5" in page and "the job was killed or is stuck" in page


class _TableNesting(html.parser.HTMLParser):
    """Each <table> of a page with the classes of the <div>s around it."""

    def __init__(self):
        super().__init__()
        self.open_divs, self.tables = [], []

    def handle_starttag(self, tag, attrs):
        if tag == "div":
            self.open_divs.append(dict(attrs).get("class", ""))
        elif tag == "table":
            self.tables.append(list(self.open_divs))

    def handle_endtag(self, tag):
        if tag == "div":
            self.open_divs.pop()


def test_wide_tables_scroll_inside_the_page_and_the_markdown_tables_stay_whole(report_run):
    _, out = report_run
    page = (out / "report.html").read_text(encoding="utf-8")
    nesting = _TableNesting()
    nesting.feed(page)
    # every table (the runs table has 24 columns) sits in a box that scrolls sideways, so the page never does
    assert len(nesting.tables) >= 10 and all("wide" in divs for divs in nesting.tables), nesting.tables
    assert re.search(r"\.wide \{[^}]*overflow-x: auto", page)
    # column names break after their underscores, so a column is as wide as its values
    assert "<th>step_<wbr>time_<wbr>vs_<wbr>predicted</th>" in page
    # cards.md: every row of a table has as many cells as its header (a "|" inside a value is escaped)
    for card in (out / "cards.md").read_text(encoding="utf-8").split("\n### ")[1:]:
        rows = [line for line in card.splitlines() if line.startswith("|")]
        cells = [len(re.findall(r"(?<!\\)\|", line)) for line in rows]
        assert rows and set(cells) == {3}, card


def test_cards_only_prints_and_writes_nothing(results, tmp_path):
    done = analyze(results, "--cards-only", "--out", tmp_path / "nothing")
    assert done.returncode == 0, done.stderr
    assert "### none-w4" in done.stdout and "report:" not in done.stdout
    assert not (tmp_path / "nothing").exists() and not (results / "report").exists()


def test_metric_option(results):
    # The cards, where the metric shows, without the figures (the README's `--metric eval_loss` command renders the
    # whole report with it; tests/docs runs that).
    done = analyze(results, "--metric", "eval_loss", "--cards-only")
    assert done.returncode == 0, done.stderr
    assert "| eval_loss (final/best) | 1.7 / 1.69 (best at step 5) |" in done.stdout  # none-w8
    bad = analyze(results, "--metric", "bleu", "--cards-only")
    assert bad.returncode == 2 and "unknown metric 'bleu'" in bad.stderr and "rougeL" in bad.stderr


def test_default_output_folder_is_results_report(study_dir, tmp_path):
    folder = tmp_path / "r"  # one run of the study: where the report goes does not depend on how many runs it has
    folder.mkdir()
    shutil.copy(study_dir / "sqrt-w1.h5", folder)
    done = analyze(folder)
    assert done.returncode == 0, done.stderr
    assert (folder / "report" / "report.html").is_file()
    again = analyze(folder)  # the report folder inside the results folder is no obstacle
    assert again.returncode == 0 and "1 run(s) analysed" in again.stdout


def test_empty_folder_exits_2(tmp_path):
    done = analyze(tmp_path)
    assert done.returncode == 2
    assert f"no t5scale run files (*.h5 with format 't5scale-run') under '{tmp_path}'" in done.stderr
    assert done.stdout == ""


def test_folder_with_only_other_files_exits_2_and_names_them(tmp_path):
    with h5py.File(tmp_path / "tokens.h5", "w") as f:
        w.set_attr(f, "format", "t5scale-tokenized-dataset")
    done = analyze(tmp_path)
    assert done.returncode == 2
    assert "1 other .h5 file(s) skipped" in done.stderr and str(tmp_path / "tokens.h5") in done.stderr


def test_missing_folder_exits_2(tmp_path):
    done = analyze(tmp_path / "absent")
    assert done.returncode == 2 and "is not a folder" in done.stderr


def test_wrapper_finds_the_python_from_the_cache_folder(tmp_path, study_dir):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "venv-path").write_text(str(Path(sys.executable).parent.parent) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "T5SCALE_PYTHON"}
    env["T5SCALE_CACHE"] = str(cache)
    done = subprocess.run([str(COMMAND), str(study_dir), "--cards-only"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "### none-w1" in done.stdout
    env["T5SCALE_CACHE"] = str(tmp_path / "no-cache")
    done = subprocess.run([str(COMMAND), str(study_dir)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and "no Python environment" in done.stderr


def test_runs_without_evaluation_price_energy_or_steps(tmp_path):
    """What a CPU demo study can look like: no price, no energy counters, no study name; one run evaluated
    only (no steps), one run with steps and no evaluation."""
    folder = tmp_path / "demo"
    folder.mkdir()
    writer = w.synthetic_run(folder / "trained.h5", n_steps=5, step_time_s=0.2, run_id="trained", study="",
                             energy_source_gpu="none", status=None)
    writer.close()
    with h5py.File(folder / "trained.h5", "r+") as f:  # the trainer's NaN for a GPU energy it cannot measure
        f["steps/gpu_energy_j"][...] = float("nan")
        f["steps/gpu_power_w"][...] = float("nan")
    only = w.RunWriter(folder / "eval-only.h5", w.root_attributes(run_id="eval-only", study=""))
    only.append_eval(w.eval_row(0, 0, step_time_s=0.0, eval_time_s=3.0, rougeL=0.2, loss=2.5))
    only.close()

    out = tmp_path / "out"
    done = analyze(folder, "--out", out)
    assert done.returncode == 0, done.stderr
    assert "| Compute Cost (LowPriority/Dedicated) | not priced/not priced (USD)" in done.stdout
    assert "| Total GPU Energy Usage | not measured (energy_source_gpu: none) |" in done.stdout
    assert "| Emissions | unknown (energy not measured) |" in done.stdout
    runs = pd.read_parquet(out / "runs.parquet").set_index("run_id")
    assert runs.loc["eval-only", "steps_completed"] == 0 and runs.loc["eval-only", "wall_time_s"] == 3.0
    assert math.isnan(runs.loc["trained", "cost_usd"])  # no price: unknown, never $0
    assert math.isnan(runs.loc["trained", "cost_low_priority_usd"])
    assert not (out / "plots" / "scaling_nostudy_gpus.png").exists()  # one world size: nothing to plot against
    assert (out / "plots" / "loss_curves_nostudy.svg").is_file()
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "Every run of this study has world size 1: no plot against the GPUs" in page
    # no power (CPU-like), no MFU in the eval-only run, but the trained run's MFU: the steps figure says what is
    # left out
    assert (out / "plots" / "steps_nostudy.png").is_file()
    assert "not drawn: GPU power (no GPU, or no NVML reading)." in page


def test_report_shows_the_best_runs_generations_and_the_step_phases(report_run):
    done, out = report_run
    assert done.returncode == 0, done.stderr
    page = (out / "report.html").read_text(encoding="utf-8")
    section = page[page.index('<h2 id="generations">'):page.index('<h2 id="cards">')]
    # sqrt-w1 has the study's best rougeL (0.41): its last evaluation, the first five examples
    assert "<b>sqrt-w1</b> (the best of the study, its best rougeL 0.41)" in section
    assert "after step 80" in section and "best run 80/4" in section and "best run 80/5" not in section
    assert "best run 40/" not in section and "worse run" not in section
    assert "ref &lt;0&gt;" in section and " ..." in section  # escaped; the source shortened


def test_phase_means_split_the_step_time():
    from t5scale_analyze import read_run
    from t5scale_analyze.plots import phase_means
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "r.h5"
        w.synthetic_run(path, n_steps=6, step_time_s=2.0, run_id="r", study="s")
        means = phase_means(read_run(path))
    # step rows: data 0.1, forward 0.3, backward 0.5, optimizer 0.1 of the step; exposed communication not measured
    assert means == pytest.approx({"data": 0.2, "forward": 0.6, "backward": 1.0, "optimizer": 0.2, "other": 0.0})


def test_the_loss_curves_draw_the_eval_loss_by_step_beside_the_train_loss(study_dir):
    import matplotlib.pyplot as plt
    from t5scale_analyze import plots, read_folder
    runs, _ = read_folder(study_dir)
    fig = plots.loss_curves_figure(runs, "rougeL", "scale")
    try:
        by_step = fig.axes[0]
        for run in runs:  # a line through each run's evaluations, at their steps, in the train loss's colour
            evals = run.evals
            drawn = [line for line in by_step.lines
                     if list(line.get_xdata()) == list(evals["step"]) and
                     list(line.get_ydata()) == pytest.approx(list(evals["loss"]))]
            assert len(drawn) == 1, run.run_id
            # drawn after the run's train loss (smoothed, then the logged points), in its colour
            smoothed_train = by_step.lines[by_step.lines.index(drawn[0]) - 2]
            assert list(smoothed_train.get_ydata()) == pytest.approx(list(plots.smoothed(run.steps["loss"])))
            assert drawn[0].get_color() == smoothed_train.get_color()
        assert "eval" in by_step.get_ylabel()
    finally:
        plt.close(fig)
