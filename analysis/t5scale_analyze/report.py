"""From a results folder to the outputs: the runs table (CSV, Parquet), the scaling, LR-scaling and Pareto
tables (CSV), the resource cards (Markdown), the figures (PNG, SVG) and one self-contained HTML report (figures
embedded as base64 PNG, no external resource)."""

from __future__ import annotations

import base64
import datetime
import html
import numbers
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

# plots (matplotlib: 0.7 s of CPU to import) is imported by the functions that write the report, so that analyze(),
# --cards-only and a command that fails on its input start without it.
from .cards import card_rows, cards_markdown
from .lr_scaling import lr_scaling_table, metric_columns, rule_tables
from .pareto import pareto_table
from .runfile import LOWER_IS_BETTER, UNFINISHED, choose_metric, last_generations, metric_label, read_folder
from .scaling import mixed_grid_runs, scaling_table
from .settings import setting_names
from .tables import format_number, runs_table, write_runs_table


@dataclass
class Analysis:
    results_dir: Path
    runs: list  # runfile.Run, in the runs table's order
    skipped: list  # runfile.Skipped
    table: pd.DataFrame  # the runs table
    metric: str | None  # the eval metric reported (None: no run was evaluated)
    scaling: pd.DataFrame
    lr_scaling: pd.DataFrame
    lr_rules: pd.DataFrame  # lr_scaling.rule_tables: the final metrics per rule and global batch, over the seeds
    lr_recovery: pd.DataFrame  # and the share of rule none's gap to k = 1 that each other rule closes
    pareto: pd.DataFrame


def analyze(results_dir, metric=None) -> Analysis:
    """Reads every run file under results_dir and builds the tables. `metric` as for choose_metric (ValueError
    for an unknown name)."""
    results_dir = Path(results_dir)
    runs, skipped = read_folder(results_dir)
    table = runs_table(runs)
    chosen = choose_metric(metric, table)
    by_path = {str(run.path): run for run in runs}
    ordered = [by_path[p] for p in table["path"]] if len(table) else []
    lr_rules, lr_recovery = rule_tables(table, chosen)
    return Analysis(results_dir=results_dir, runs=ordered, skipped=skipped, table=table, metric=chosen,
                    scaling=scaling_table(table), lr_scaling=lr_scaling_table(table, chosen), lr_rules=lr_rules,
                    lr_recovery=lr_recovery, pareto=pareto_table(table, chosen))


# ---------------------------------------------------------------------------------------------------------------
# HTML pieces


def _header_cell(name) -> str:
    """A column name that may break after its underscores (step_time_vs_predicted over three lines), so that a
    column is as wide as its values rather than its name."""
    return "_<wbr>".join(html.escape(part) for part in str(name).split("_"))


def html_table(df: pd.DataFrame, columns=None) -> str:
    """The table in a box that scrolls sideways when the table is wider than the page (the page itself never
    does); long texts (notes, paths) wrap inside their cells."""
    if columns is not None:
        df = df[[c for c in columns if c in df]]
    if df.empty:
        return "<p><em>no rows</em></p>"
    head = "".join(f"<th>{_header_cell(c)}</th>" for c in df.columns)
    body = []
    for _, row in df.iterrows():
        cells = []
        for value in row:
            text = html.escape(format_number(value))
            numeric = isinstance(value, numbers.Number) and not isinstance(value, bool)
            cells.append(f'<td class="num">{text}</td>' if numeric else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def html_figure(fig, plot_dir: Path, stem: str, caption: str) -> str:
    """Saves the figure as <stem>.png and .svg under plot_dir (plots.save) and embeds the PNG with its caption."""
    from . import plots
    png, _ = plots.save(fig, plot_dir, stem)
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return (f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(caption)} (also {html.escape(png.with_suffix('.svg').name)})"
            f"</figcaption></figure>")


STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 110em; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; vertical-align: top; }
td:not(.num) { overflow-wrap: anywhere; }
.wide { max-width: 100%; overflow-x: auto; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f0f0f0; }
figure { margin: 1em 0; } figure img { max-width: 100%; }
figcaption { font-size: 0.85em; color: #555; }
.card { display: inline-block; vertical-align: top; margin: 0 1.5em 1.5em 0; max-width: 100%; }
.note { color: #8a4b00; }
"""

DEFINITIONS = """
<ul>
<li><b>wall_time_s</b>: since the run's first start (resumed attempts included), to the last step or evaluation.
<b>train_time_s</b>: the sum of the step times; <b>samples_per_s</b> = samples_total / train_time_s.</li>
<li><b>speedup</b>: samples_per_s relative to the series' reference, its setting (the repeats of one run, averaged)
of the highest throughput at its smallest world size (<b>base_world_size</b>, <b>reference_setting</b>);
<b>parallel_efficiency</b> = speedup / (world_size / base_world_size). A series is the runs of one problem: the same
model, data, lengths, steps, optimizer, LR plan, precision and global batch on the same kind of device, whatever TP,
micro batch, accumulation, ZeRO or checkpointing split it. A series on one world size has neither (empty): a run
whose global batch grows with the ranks is compared with no other.</li>
<li><b>cost_usd</b> = price_per_node_hour_usd x nodes x node_share_fraction x wall_time_s / 3600 (the share of each
node the run held: 1 of 4 GPUs is a quarter; node_share_basis says how it was found), or price_per_gpu_hour_usd x
GPUs held x wall_time_s / 3600; unknown (empty, never 0) when no price is set. The low-priority cost uses
cost.low_priority_price_per_node_hour_usd on the same node-hours charged (<b>charged_node_hours</b>).</li>
<li><b>energy_kwh</b> = (GPU J + CPU J) / 3.6e6 x PUE, the counters summed over ranks (a source that measured
nothing counts as 0); <b>co2_kg</b> = energy_kwh x carbon_intensity_g_per_kwh / 1000.</li>
<li>A run resumed on another world size has a run file per grid: the resuming job set the old one aside as
<code>&lt;run&gt;.h5.world&lt;N&gt;.&lt;time&gt;</code>. They are joined into one run: its rows are every file's in
step order (a step that two files hold, trained again after a checkpoint, is the later file's); its figures are the
newest file's, which carries those of the grids before: wall time, cost (each grid's nodes and price), energy and
CO2 summed over the grids, steps, throughput, means and MFU over the rows kept. <b>attempts</b> counts the attempts, <b>attempt_world_sizes</b> names the grids. Such a run
is left out of the scaling tables. A file set aside as unreadable (<code>&lt;run&gt;.h5.unreadable.&lt;time&gt;</code>)
is not joined; it is listed with the skipped files and in the run's notes.</li>
<li>A run whose file still says running has the figures of its flushed steps; its totals are not final. It is
<b>running</b> while its file is being written (written within three of its flush intervals, or ten minutes),
<b>incomplete</b> when nothing has written it for longer (its job killed or stuck; the file cannot tell which),
<b>stale</b> when nothing has written it for two hours (its job was most likely killed), and <b>failed</b> when a
rank left a failure note beside it (the error is in the notes). Pareto fronts use completed runs only.</li>
<li><b>sampling_low</b>, <b>sampling_high</b>: the interval an eval metric in [0, 1] that is a mean over n examples
is measured to, Wilson's score interval at one standard error, (q + 1/2n -+ sqrt(q (1 - q) / n + 1/4n<sup>2</sup>)) /
(1 + 1/n). For outcomes of 0 or 1 (accuracy, exact match) it is the proportion's interval; a graded score (F1,
ROUGE) varies at most as much as 0/1 outcomes of its mean, so the same interval covers it. Unlike q &plusmn;
sqrt(q (1 - q) / n), it is not a single point at q = 0 or 1: accuracy 1.0 on 56 examples is 0.982 ... 1 (n/(n+1)
... 1). The eval loss, not bounded, has none.</li>
</ul>
"""


def write_report(analysis: Analysis, out_dir) -> dict:
    """Writes every output under out_dir; returns {what: path}."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    runs_csv, runs_parquet = write_runs_table(analysis.table, out_dir)
    written.update(runs_csv=runs_csv, runs_parquet=runs_parquet)
    for what, df in (("scaling", analysis.scaling), ("lr_scaling", analysis.lr_scaling), ("lr_rules", analysis.lr_rules),
                     ("lr_recovery", analysis.lr_recovery), ("pareto", analysis.pareto)):
        written[what] = out_dir / f"{what}.csv"
        df.to_csv(written[what], index=False)
    written["cards"] = out_dir / "cards.md"
    written["cards"].write_text(cards_markdown(analysis.table, analysis.metric), encoding="utf-8")

    plot_dir = out_dir / "plots"
    sections = [_header(analysis), _runs_section(analysis), _curves_section(analysis, plot_dir),
                _scaling_section(analysis, plot_dir), _lr_section(analysis, plot_dir),
                _pareto_section(analysis, plot_dir), _generations_section(analysis), _cards_section(analysis),
                _skipped_section(analysis), '<h2 id="definitions">Definitions</h2>' + DEFINITIONS]
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>t5scale report</title>"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(sections) + "\n</body></html>\n")
    written["report"] = out_dir / "report.html"
    # written whole and then renamed: a browser (or t5scale-analyze watch's reader) never sees half a page
    partial = out_dir / ".report.html.partial"
    partial.write_text(page, encoding="utf-8")
    partial.replace(written["report"])
    written["plots"] = plot_dir
    return written


def _metric_text(analysis: Analysis) -> str:
    return metric_label(analysis.metric) if analysis.metric else "none (no evaluations)"


def _header(analysis: Analysis) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return ("<h1>t5scale report</h1>"
            f"<p>Results folder <code>{html.escape(str(analysis.results_dir))}</code>: {len(analysis.runs)} run(s), "
            f"{len(analysis.skipped)} file(s) skipped. Eval metric: <b>{html.escape(_metric_text(analysis))}</b>. "
            f"Written {now}.</p>"
            '<p>Contents: <a href="#runs">runs</a> · <a href="#curves">training curves and steps</a> · '
            '<a href="#scaling">scaling</a> · <a href="#lr">learning-rate scaling</a> · '
            '<a href="#pareto">cost/quality Pareto front</a> · <a href="#generations">generations</a> · '
            '<a href="#cards">resource cards</a> · <a href="#skipped">skipped files</a> · '
            '<a href="#definitions">definitions</a></p>')


def _runs_section(analysis: Analysis) -> str:
    table = analysis.table
    counts = table["status"].value_counts().to_dict() if len(table) else {}
    parts = ['<h2 id="runs">Runs</h2>',
             "<p>" + ", ".join(f"{html.escape(str(k))}: {v}" for k, v in sorted(counts.items())) +
             ". Every column (root attributes, <code>cfg.*</code> config keys, summary figures) is in "
             "<code>runs.csv</code> and <code>runs.parquet</code>.</p>"]
    overview = ["run_id", "study", "status", "attempts", "attempt_world_sizes", "nodes", "gpus_per_node",
                "world_size", "tp", "dp", "global_batch", "lr_scaling_rule", "effective_lr", "steps_completed",
                "wall_time_s", "median_step_time_s", "predicted_step_time_s", "step_time_vs_predicted",
                "samples_per_s", "cost_usd", "energy_kwh", "co2_kg"]
    overview += metric_columns(analysis.metric)[1:2] + ["summary_source"]
    parts.append(html_table(table, overview))
    # runs whose totals are not final, and runs joined from several files or missing a set-aside one
    noted = table[table["status"].isin(UNFINISHED) | (table["attempt_files"] > 1)
                  | (table["unjoined_files"] != "")] if len(table) else table
    for _, row in noted.iterrows():
        parts.append(f'<p class="note">{html.escape(str(row["run_id"]))}: {html.escape(str(row["notes"]))}</p>')
    return "\n".join(parts)


def _study_runs(analysis: Analysis, study) -> list:
    return [run for run in analysis.runs if str(run.attrs.get("study", "") or "") == str(study or "")]


def _studies(analysis: Analysis) -> list:
    return sorted({str(run.attrs.get("study", "") or "") for run in analysis.runs})


def _curves_section(analysis: Analysis, plot_dir: Path) -> str:
    from . import plots
    metric, mlabel = analysis.metric, _metric_text(analysis)
    settings = setting_names(analysis.table)
    parts = ['<h2 id="curves">Training curves and steps</h2>']
    for study in _studies(analysis):
        stem, name = plots.file_stem(study), plots.study_name(study)
        runs = _study_runs(analysis, study)
        parts.append(f"<h3>study {html.escape(name)}</h3>")
        parts.append(html_figure(plots.loss_curves_figure(runs, metric, f"{name}: loss curves"), plot_dir,
                                 f"loss_curves_{stem}", f"{name}: train loss per run against step and samples seen, "
                                 "and the eval loss against the step where the runs recorded it"
                                 + (f", {mlabel} against samples seen" if metric else "")))
        fig, missing = plots.step_profile_figure(runs, lambda run: settings.get(str(run.path), run.run_id),
                                                 f"{name}: where the step goes")
        if fig is None:
            parts.append("<p><em>no run with measured steps</em></p>")
            continue
        parts.append(html_figure(fig, plot_dir, f"steps_{stem}",
                                 f"{name}: mean step time by phase per setting (the seeds of a run averaged), "
                                 "and step time, throughput, memory, power and MFU against the step"))
        if missing:
            parts.append("<p>Not measured by any run of this study, so not drawn: "
                         + html.escape(", ".join(missing)) + ".</p>")
    return "\n".join(parts)


def _scaling_section(analysis: Analysis, plot_dir: Path) -> str:
    from . import plots
    parts = ['<h2 id="scaling">Scaling</h2>']
    if analysis.scaling.empty:
        parts.append("<p><em>no run with measured steps</em></p>")
    mixed = mixed_grid_runs(analysis.table)
    if len(mixed):
        parts.append('<p class="note">Left out, resumed on another world size (their throughput mixes grids): '
                     + ", ".join(f"{html.escape(str(r['run_id']))} "
                                 f"(world sizes {html.escape(str(r['attempt_world_sizes']))})"
                                 for _, r in mixed.iterrows()) + ".</p>")
    for study, group in analysis.scaling.groupby("study", sort=True, dropna=False):
        stem, name = plots.file_stem(study), plots.study_name(study)
        parts += [f"<h3>study {html.escape(name)}</h3>", html_table(group)]
        if group["world_size"].nunique() < 2:
            parts.append(f"<p>Every run of this study has world size {group['world_size'].iloc[0]}: no plot against "
                         "the GPUs (the table above has each run's time, throughput and cost).</p>")
            continue
        parts.append(html_figure(plots.scaling_figure(group, "world_size", f"{name}: scaling with GPUs"), plot_dir,
                                 f"scaling_{stem}_gpus",
                                 f"{name}: time, throughput, speedup, efficiency, cost, energy and CO2 against GPUs"))
        if group["nodes"].nunique() > 1:
            parts.append(html_figure(plots.scaling_figure(group, "nodes", f"{name}: scaling with nodes"), plot_dir,
                                     f"scaling_{stem}_nodes",
                                     f"{name}: the same against nodes, a line per GPUs-per-node"))
        else:
            parts.append(f"<p>All runs of this study use {group['nodes'].iloc[0]} node(s): no plot against nodes.</p>")
    return "\n".join(parts)


def _lr_section(analysis: Analysis, plot_dir: Path) -> str:
    from . import plots
    metric, mlabel = analysis.metric, _metric_text(analysis)
    parts = ['<h2 id="lr">Learning-rate scaling</h2>']
    constant = []
    for study, group in analysis.lr_scaling.groupby("study", sort=True, dropna=False):
        stem, name = plots.file_stem(study), plots.study_name(study)
        if group["global_batch"].nunique() < 2 and group["lr_scaling_rule"].nunique() < 2:
            constant.append(f"{name} (global batch {group['global_batch'].iloc[0]}, rule "
                            f"{group['lr_scaling_rule'].iloc[0]})")
            continue
        parts += [f"<h3>study {html.escape(name)}</h3>", html_table(group)]
        if metric is None or not group[f"best_{metric}"].notna().any():
            parts.append(f"<p><em>no run of this study measured {html.escape(mlabel)}</em></p>")
            continue
        points = analysis.lr_rules[analysis.lr_rules["study"].fillna("") == study]
        recovery = analysis.lr_recovery[analysis.lr_recovery["study"].fillna("") == study]
        points_by_metric = {}
        for m, rows in points.groupby("metric", sort=False):
            label = metric_label(m)
            points_by_metric[m] = rows
            parts.append(f"<h4>final {html.escape(label)} per rule and global batch, over the runs (seeds)</h4>")
            parts.append(html_table(rows.drop(columns="metric")))
            gaps = recovery[recovery["metric"] == m]
            if not gaps.empty:
                parts.append(f"<p>The share of the gap that rule none leaves to k = 1 that each rule closes "
                             f"({html.escape(label)}; 100% = as good as k = 1):</p>")
                parts.append(html_table(gaps.drop(columns="metric").dropna(axis=1, how="all")))
        figure = plots.rule_points_figure(points_by_metric,
                                          f"{name}: final eval metrics against global batch per LR rule")
        parts.append(html_figure(figure, plot_dir, f"lr_scaling_{stem}",
                                 f"{name}: final {mlabel} against the global batch per LR rule, mean and range over "
                                 "the runs (seeds)"))
    if constant:
        parts.append("<p>One global batch and one LR rule in every run, so nothing to compare here: "
                     + html.escape("; ".join(constant)) + ".</p>")
    return "\n".join(parts)


def _pareto_section(analysis: Analysis, plot_dir: Path) -> str:
    from . import plots
    parts = ['<h2 id="pareto">Cost/quality Pareto front</h2>',
             "<p>Per setting (the runs that differ only in their seed), the mean cost and best eval metric of its "
             "runs. One setting beats another on an axis only where their intervals are apart: cost from the "
             "cheapest to the costliest run; quality from the worst to the best run, widened to the sampling "
             "interval of a score in [0, 1] averaged over the eval examples (sampling_low, sampling_high: Wilson's "
             "score interval at one standard error, see the definitions). The front is the settings that no "
             "other is at least as good as within the noise and better beyond it; it does not rank settings "
             "within the noise of each other.</p>"]
    if analysis.pareto.empty:
        parts.append("<p><em>no completed run with an evaluation</em></p>")
    for study, group in analysis.pareto.groupby("study", sort=True, dropna=False):
        stem, name = plots.file_stem(study), plots.study_name(study)
        parts.append(f"<h3>study {html.escape(name)}</h3>")
        if group["cost_axis"].iloc[0] != "cost_usd":
            parts.append("<p>Not every run has a known cost (a price): cost is in node-hours.</p>")
        parts.append(html_table(group.drop(columns=["study", "metric"])))
        if len(group) < 2:
            parts.append("<p>One setting: no front to draw.</p>")
            continue
        parts.append(html_figure(plots.pareto_figure(group, f"{name}: cost against best {_metric_text(analysis)}"),
                                 plot_dir, f"pareto_{stem}", f"{name}: cost/quality Pareto front per setting, with the "
                                 "intervals it is judged on (filled: on the front)"))
    return "\n".join(parts)


GENERATIONS_SHOWN = 5
SOURCE_SHOWN_CHARS = 240


def _generations_section(analysis: Analysis) -> str:
    """Per study, the first generations of the last evaluation of its best run (by the report's metric), beside
    their references, from the generations file the trainer writes beside the run file."""
    from . import plots
    parts = ['<h2 id="generations">Generations</h2>']
    metric = analysis.metric
    shown = False
    for study in _studies(analysis):
        runs = _study_runs(analysis, study)
        if metric is not None:
            sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
            runs = sorted(runs, key=lambda run: -sign * float(run.summary.get(f"best_{metric}", float("nan")))
                          if pd.notna(run.summary.get(f"best_{metric}")) else float("inf"))
        # the best run that wrote generations: files are read in that order, until one has some
        step, rows, run = None, [], None
        for candidate in runs:
            step, rows = last_generations(candidate, GENERATIONS_SHOWN)
            if step is not None:
                run = candidate
                break
        if run is None:
            continue
        table = pd.DataFrame([{"index": r.get("index", ""), "prediction": r.get("prediction", ""),
                               "reference": r.get("reference", ""),
                               "source": _shortened(str(r.get("source", "")), SOURCE_SHOWN_CHARS)} for r in rows])
        best = (f"its best {metric_label(metric)} {float(run.summary.get(f'best_{metric}')):.4g}"
                if metric is not None and pd.notna(run.summary.get(f"best_{metric}")) else "")
        parts.append(f"<h3>study {html.escape(plots.study_name(study))}</h3><p>Run "
                     f"<b>{html.escape(run.run_id)}</b>{' (the best of the study, ' + html.escape(best) + ')' if best else ''}"
                     f", the first {len(rows)} examples of its evaluation after step {step}:</p>")
        parts.append(html_table(table))
        shown = True
    if not shown:
        parts.append("<p><em>no generations file (&lt;run&gt;.eval.jsonl, eval.write_generations) beside any run "
                     "file</em></p>")
    return "\n".join(parts)


def _shortened(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars].rstrip() + " ..."


def _cards_section(analysis: Analysis) -> str:
    parts = ['<h2 id="cards">Resource cards</h2>']
    for _, row in analysis.table.iterrows():
        rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
                       for k, v in card_rows(row, analysis.metric))
        parts.append(f'<div class="card"><h3>{html.escape(str(row["run_id"]))}</h3>'
                     f'<div class="wide"><table><thead><tr><th>key</th><th>value</th></tr></thead><tbody>{rows}'
                     f"</tbody></table></div></div>")
    return "\n".join(parts)


def _skipped_section(analysis: Analysis) -> str:
    if not analysis.skipped:
        return '<h2 id="skipped">Skipped files</h2><p>none</p>'
    rows = pd.DataFrame([{"path": str(s.path), "reason": s.reason} for s in analysis.skipped])
    return '<h2 id="skipped">Skipped files</h2>' + html_table(rows)
