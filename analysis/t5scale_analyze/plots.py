"""Figures of the report, drawn with matplotlib's Agg backend (no display) and saved as PNG and SVG."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.layout_engine import PlaceHolderLayoutEngine  # noqa: E402
from matplotlib.ticker import NullFormatter, ScalarFormatter  # noqa: E402

from .runfile import LOWER_IS_BETTER, cpu_only, metric_label  # noqa: E402

plt.rcParams.update({"svg.hashsalt": "t5scale", "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})

SCALING_PANELS = (
    ("mean_step_time_s", "time per step (s)"),
    ("samples_per_s", "throughput (samples/s)"),
    ("speedup", "speedup"),
    ("parallel_efficiency", "parallel efficiency"),
    ("train_time_s", "training time (s)"),
    ("cost_usd", "cost (USD)"),
    ("energy_kwh", "energy (kWh)"),
    ("co2_kg", "CO2 (kg)"),
)


# What an empty panel says: why its figure is unknown for every run (never drawn as 0).
UNKNOWN_PANEL = {
    "speedup": "no run of the same problem\n(global batch, steps, ...) on fewer GPUs",
    "parallel_efficiency": "no run of the same problem\n(global batch, steps, ...) on fewer GPUs",
    "cost_usd": "unknown: no price\n(cost.price_per_node_hour_usd or price_per_gpu_hour_usd)",
}


def file_stem(text: str) -> str:
    """A name that is safe in a file name; an empty study is "nostudy"."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("_") or "nostudy"


def study_name(study) -> str:
    return str(study) if str(study) else "(no study)"


PNG_DPI = 110


def save(fig, out_dir: Path, stem: str) -> tuple:
    """Writes <stem>.png and <stem>.svg under out_dir, both cropped to the figure's tight box, and closes the figure.
    The box is found once, by one layout pass at the PNG's resolution: bbox_inches="tight" would lay the figure out
    again for each file before drawing it (each such pass is about an eighth of the time a figure takes)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png, svg = out_dir / f"{stem}.png", out_dir / f"{stem}.svg"
    fig.set_dpi(PNG_DPI)
    # tight_layout() lays the figure out once and leaves a placeholder engine behind, for which savefig would lay it
    # out again (one more pass per file) to no effect: the placeholder goes; a real engine would stay.
    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        fig.set_layout_engine(None)
    fig.draw_without_rendering()
    tight = fig.get_tightbbox(fig.canvas.get_renderer()).padded(plt.rcParams["savefig.pad_inches"])
    fig.savefig(png, dpi=PNG_DPI, bbox_inches=tight, metadata={"Software": None})
    fig.savefig(svg, bbox_inches=tight, metadata={"Date": None})
    plt.close(fig)
    return png, svg


def _log2_axis(ax, values) -> None:
    values = sorted({float(v) for v in values if np.isfinite(v) and v > 0})
    if not values:
        return
    ax.set_xscale("log", base=2)
    ax.set_xlim(values[0] / 1.4, values[-1] * 1.4)  # explicit: a panel with nothing drawn has no data limits
    ax.set_xticks(values)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _legend_below(fig, axes) -> None:
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(3, len(handles)),
                   fontsize=8, frameon=False)


def scaling_figure(table: pd.DataFrame, x: str, title: str):
    """The scaling panels of one study against `x` ("world_size" or "nodes"): a line per series (per series and
    GPUs per node against nodes) through the mean of each x, a marker per run."""
    fig, axes = plt.subplots(2, 4, figsize=(15, 6.5))
    axes = axes.ravel()
    group_keys = ["series"] if x == "world_size" else ["series", "gpus_per_node"]
    # CPU runs (every device "cpu") have ranks, not GPUs.
    on_cpu = len(table) > 0 and "device_names" in table and all(cpu_only(names) for names in table["device_names"])
    rank_word = "CPU rank(s)" if on_cpu else "GPU(s)"
    for keys, group in table.groupby(group_keys, sort=True):
        keys = keys if isinstance(keys, tuple) else (keys,)
        label = keys[0] if x == "world_size" else f"{keys[0]}, {keys[1]} {rank_word}/node"
        for ax, (column, ylabel) in zip(axes, SCALING_PANELS):
            if column not in group:
                continue
            values = group[[x, column]].astype(float)
            means = values.groupby(x)[column].mean()
            line, = ax.plot(means.index, means.to_numpy(), marker="o", label=label)
            ax.scatter(values[x], values[column], s=12, color=line.get_color(), alpha=0.6)
    compared = table["base_world_size"].astype(float) if "base_world_size" in table else pd.Series(dtype=float)
    for ax, (column, ylabel) in zip(axes, SCALING_PANELS):
        if x == "world_size" and column == "speedup" and np.isfinite(compared).any():
            base = float(compared.min())
            xs = np.array(sorted(set(table.loc[np.isfinite(compared), x].astype(float))))
            ax.plot(xs, xs / base, color="grey", linestyle="--", linewidth=1, label="_ideal")
        if x == "world_size" and column == "parallel_efficiency":
            ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        if column not in table or not np.isfinite(table[column].astype(float)).any():
            ax.text(0.5, 0.5, UNKNOWN_PANEL.get(column, "not measured"), transform=ax.transAxes, ha="center",
                    va="center", color="grey")
        _log2_axis(ax, table[x].astype(float))
        ax.set_xlabel(("CPU ranks" if on_cpu else "GPUs") + " (world size)" if x == "world_size" else "nodes")
        ax.set_ylabel(ylabel)
    fig.suptitle(title)
    fig.tight_layout()
    _legend_below(fig, axes)
    return fig


def rule_points_figure(points_by_metric: dict, title: str):
    """A panel per eval metric: the final value against the global batch, a line per LR-scaling rule through the mean
    of its runs (seeds) with their range as bars; the k = 1 runs' range shaded; runs whose global batch stays fixed
    while the ranks change, grey squares."""
    metrics = [m for m, points in points_by_metric.items() if not points.empty]
    fig, axes = plt.subplots(1, max(1, len(metrics)), figsize=(6.5 * max(1, len(metrics)), 4.5), squeeze=False)
    axes = axes.ravel()
    for ax, metric in zip(axes, metrics):
        points = points_by_metric[metric]
        scaled = points[points["batch_mode"] != "fixed_global"]
        fixed = points[points["batch_mode"] == "fixed_global"]
        at_k1 = scaled[scaled["k"] == 1.0]
        if len(at_k1):
            ax.axhspan(float(at_k1["min"].min()), float(at_k1["max"].max()), color="grey", alpha=0.15,
                       label="k = 1: range of its runs")
        by = ["variant", "lr_scaling_rule"] if "variant" in scaled else ["lr_scaling_rule"]
        for i, (keys, group) in enumerate(scaled.groupby(by, sort=True)):
            keys = keys if isinstance(keys, tuple) else (keys,)
            variant = f"{keys[0]}, " if len(keys) > 1 and keys[0] != "all" else ""
            group = group.sort_values("global_batch")
            x = group["global_batch"].astype(float) * (1.0 + 0.03 * (i - 1))  # rules side by side, not on top
            mean = group["mean"].astype(float)
            ax.errorbar(x, mean, yerr=[mean - group["min"].astype(float), group["max"].astype(float) - mean],
                        marker="o", capsize=3, label=f"{variant}LR rule {keys[-1]}")
        if len(fixed):
            mean = fixed["mean"].astype(float)
            ax.errorbar(fixed["global_batch"].astype(float), mean,
                        yerr=[mean - fixed["min"].astype(float), fixed["max"].astype(float) - mean], marker="s",
                        linestyle="none", color="grey", capsize=3, label="global batch fixed, ranks vary")
        _log2_axis(ax, points["global_batch"].astype(float))
        ax.set_xlabel("global batch (samples)")
        lower = metric in LOWER_IS_BETTER
        ax.set_ylabel(f"final {metric_label(metric)}" + (" (lower is better)" if lower else ""))
        if lower and (points["min"].astype(float) > 0).all():
            ax.set_yscale("log")  # one diverged or untrained point would flatten the others on a linear axis
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def smoothed(values: pd.Series) -> np.ndarray:
    """An exponential moving average over about a twentieth of the points (TensorBoard's smoothing), debiased at
    the start so that the first points are not pulled towards zero."""
    x = values.astype(float).to_numpy()
    if len(x) < 3:
        return x
    alpha = min(1.0, 20.0 / len(x))
    out, average, weight = np.empty_like(x), 0.0, 0.0
    for i, value in enumerate(x):
        average = (1 - alpha) * average + alpha * value
        weight = (1 - alpha) * weight + alpha
        out[i] = average / weight
    return out


def _eval_loss(run) -> pd.Series | None:
    """The run's eval loss by step (finite values only; the last evaluation at a step evaluated twice), or None."""
    if not len(run.evals) or "loss" not in run.evals or "step" not in run.evals:
        return None
    values = pd.Series(run.evals["loss"].astype(float).to_numpy(), index=run.evals["step"].to_numpy())
    values = values[np.isfinite(values.to_numpy())]
    values = values[~values.index.duplicated(keep="last")]
    return values if len(values) else None


def loss_curves_figure(runs: list, metric: str | None, title: str):
    """Train loss against step and against samples seen (runs with different global batches compare on the
    second), smoothed with the logged points faint, on a log axis, with the eval loss beside it (squares, in the
    run's colour) where the run recorded one; and the eval metric against samples seen. Many
    runs: a colour per global batch and a line style per LR rule, one legend entry for each pair (the seeds of a
    run share it); few: a colour per run."""
    panels = 3 if metric is not None else 2
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4.2))
    by_setting = len(runs) > 8
    batches = sorted({int(run.attrs.get("global_batch", 0) or 0) for run in runs})
    rules = sorted({str(run.attrs.get("lr_scaling_rule", "?")) for run in runs})
    colormap = plt.get_cmap("viridis")
    labelled = set()
    for run in runs:
        steps = run.steps
        rule, batch = str(run.attrs.get("lr_scaling_rule", "?")), int(run.attrs.get("global_batch", 0) or 0)
        if by_setting:
            key = (rule, batch)
            style = {"color": colormap(batches.index(batch) / max(1, len(batches) - 1) * 0.9),
                     "linestyle": ["-", "--", ":", "-."][rules.index(rule) % 4]}
            label = f"batch {batch}, LR rule {rule}" if key not in labelled else "_"
            labelled.add(key)
        else:
            style, label = {}, f"{run.run_id} ({rule}, batch {batch})"
        if len(steps) and "loss" in steps and "step" in steps:
            seen = steps["samples"].cumsum() if "samples" in steps else steps["step"]
            line, = axes[0].plot(steps["step"], smoothed(steps["loss"]), linewidth=1.2, label=label, **style)
            style = {"color": line.get_color(), "linestyle": line.get_linestyle()}
            axes[0].plot(steps["step"], steps["loss"], linewidth=0.6, alpha=0.2, color=style["color"])
            axes[1].plot(seen, smoothed(steps["loss"]), linewidth=1.2, **style)
            axes[1].plot(seen, steps["loss"], linewidth=0.6, alpha=0.2, color=style["color"])
        eval_loss = _eval_loss(run)
        if eval_loss is not None:
            # by step, in the run's colour and line style: squares tell it from the train loss
            line, = axes[0].plot(eval_loss.index.to_numpy(), eval_loss.to_numpy(), marker="s", markersize=3.5,
                                 linewidth=0.9, label="_eval loss", gid=f"eval_loss:{run.run_id}", **style)
            style = {"color": line.get_color(), "linestyle": line.get_linestyle()}
        if metric is not None and len(run.evals) and metric in run.evals and len(steps) and "samples" in steps:
            # samples seen at each evaluated step, from the steps' cumulative samples
            cumulative = pd.Series(steps["samples"].cumsum().to_numpy(), index=steps["step"].to_numpy())
            seen_at_eval = cumulative.reindex(run.evals["step"].to_numpy(), method="ffill").fillna(0)
            axes[2].plot(seen_at_eval.to_numpy(), run.evals[metric], marker="o", markersize=3, linewidth=1, **style)
    axes[0].set_xlabel("step")
    axes[1].set_xlabel("samples seen")
    for ax in axes[:2]:
        ax.set_ylabel("train loss (smoothed; logged points faint)")
        # the smoothed lines set the range: a single logged loss near 0 would otherwise take most of the axis
        losses = [y for line in ax.lines if line.get_alpha() is None for y in line.get_ydata() if np.isfinite(y)]
        if losses and min(losses) > 0:
            ax.set_yscale("log")  # the first steps' loss would flatten the rest on a linear axis
            ax.set_ylim(min(losses) / 1.5, max(losses) * 1.5)
    if any(str(line.get_gid()).startswith("eval_loss:") for line in axes[0].lines):
        axes[0].set_ylabel("loss: train (smoothed; logged points faint),\neval (squares)")
    if metric is not None:
        if not axes[2].lines:
            axes[2].text(0.5, 0.5, "no evaluation during training", transform=axes[2].transAxes, ha="center",
                         va="center", color="grey")
        axes[2].set_xlabel("samples seen")
        axes[2].set_ylabel(metric_label(metric))
    fig.suptitle(title)
    fig.tight_layout()
    _legend_below(fig, axes)
    return fig


def pareto_figure(table: pd.DataFrame, title: str):
    """Cost against the best eval metric per setting (the mean of its runs), with the intervals the front is
    judged on (cost: the runs' range; quality: the runs' range widened to the sampling interval, Wilson's); the
    front's settings filled and joined, the dominated ones hollow."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for on_front, colour in ((False, "grey"), (True, "tab:red")):
        part = table[table["on_front"] == on_front]
        if part.empty:
            continue
        xerr = [(part["cost"] - part["cost_min"]).clip(lower=0), (part["cost_max"] - part["cost"]).clip(lower=0)]
        yerr = [(part["best_metric"] - part["quality_low"]).clip(lower=0),
                (part["quality_high"] - part["best_metric"]).clip(lower=0)]
        ax.errorbar(part["cost"], part["best_metric"], xerr=xerr, yerr=yerr, fmt="o", color=colour,
                    markerfacecolor=colour if on_front else "none", elinewidth=0.8, capsize=2,
                    label="Pareto front (beyond the noise)" if on_front else "dominated beyond the noise")
    front = table[table["on_front"]].sort_values("cost")
    ax.plot(front["cost"], front["best_metric"], color="tab:red", linewidth=0.8, drawstyle="steps-post")
    for _, row in table.iterrows():
        repeats = row["runs"] > 1 and not str(row["setting"]).endswith(" more")
        ax.annotate(f"{row['setting']} (x{row['runs']})" if repeats else str(row["setting"]),
                    (row["cost"], row["best_metric"]), fontsize=7, xytext=(4, 3), textcoords="offset points")
    axis = table["cost_axis"].iloc[0] if len(table) else "cost_usd"
    ax.set_xlabel("cost (USD)" if axis == "cost_usd" else "node-hours (no price per node-hour set)")
    metric = table["metric"].iloc[0] if len(table) else ""
    ax.set_ylabel("best " + metric_label(metric) + " (mean of the runs)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


PHASES = (("data_time_s", "data"), ("forward_time_s", "forward"), ("backward_time_s", "backward"),
          ("optimizer_time_s", "optimizer"), ("comm_exposed_time_s", "exposed communication"))


def phase_means(run) -> dict:
    """Mean time per step of each phase, and "other" (the step time less the phases), over the steps after the
    first (whose time holds the start-up); phases never measured are left out."""
    steps = run.steps.iloc[1:] if len(run.steps) > 1 else run.steps
    out = {}
    if "step_time_s" not in steps or not np.isfinite(steps["step_time_s"].astype(float)).any():
        return out
    total = float(steps["step_time_s"].astype(float).mean())
    for column, label in PHASES:
        if column in steps and np.isfinite(steps[column].astype(float)).any():
            out[label] = float(steps[column].astype(float).mean())
    out["other"] = max(0.0, total - sum(out.values()))
    return out


def step_profile_figure(runs: list, setting_of, title: str):
    """Where the time, memory and power of a study's runs go: the mean step time of each setting split into its
    phases, and against the step: step time, throughput, memory (device peak, else host), GPU power and MFU. A panel only
    where some run measured its quantity. `setting_of(run)` names the run's setting (its seeds share a colour).
    Returns (figure, [what no run measured]); (None, ...) without steps."""
    from .runfile import rank_series
    runs = [run for run in runs if len(run.steps) and "step" in run.steps]
    if not runs:
        return None, []
    missing = []
    series = {"step time (s, smoothed)": {}, "throughput (samples/s, smoothed)": {}, "memory (GiB, max over ranks)": {},
              "GPU power (W, sum over ranks)": {}, "MFU": {}}
    device_peaks = [rank_series(run, "memory_peak_bytes", "max") for run in runs]
    device_memory = any(np.isfinite(peaks).any() for peaks in device_peaks)
    for i, run in enumerate(runs):  # keyed by the run's index in `runs`
        steps = run.steps
        if "step_time_s" in steps:
            series["step time (s, smoothed)"][i] = smoothed(steps["step_time_s"])
        if "samples_per_s" in steps:
            series["throughput (samples/s, smoothed)"][i] = smoothed(steps["samples_per_s"])
        memory = device_peaks[i] if device_memory else rank_series(run, "host_memory_bytes", "max")
        series["memory (GiB, max over ranks)"][i] = memory / 1024.0 ** 3
        series["GPU power (W, sum over ranks)"][i] = rank_series(run, "gpu_power_w", "sum")
        if "mfu" in steps:
            series["MFU"][i] = steps["mfu"].astype(float).to_numpy()
    shown = {}
    for name, by_run in series.items():
        if any(np.isfinite(v).any() for v in by_run.values()):
            shown[name] = by_run
        else:
            missing.append({"GPU power (W, sum over ranks)": "GPU power (no GPU, or no NVML reading)",
                            "MFU": "MFU (no peak FLOPs known for the device)",
                            "memory (GiB, max over ranks)": "memory"}.get(name, name))
    settings = []
    for run in runs:
        if setting_of(run) not in settings:
            settings.append(setting_of(run))
    colours = {s: plt.get_cmap("tab10" if len(settings) <= 10 else "tab20")(i % 20) for i, s in enumerate(settings)}
    panels = 1 + len(shown)
    columns = min(3, panels)
    rows = (panels + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.9 * rows), squeeze=False)
    axes = axes.ravel()
    # phases: one bar per setting, the mean over its runs
    ax = axes[0]
    by_setting = {}
    for run in runs:
        by_setting.setdefault(setting_of(run), []).append(phase_means(run))
    labels = [label for _, label in PHASES] + ["other"]
    left = np.zeros(len(settings))
    for j, label in enumerate(labels):
        widths = np.array([np.mean([m.get(label, np.nan) for m in by_setting[s]]) for s in settings])
        if not np.isfinite(widths).any():
            continue
        widths = np.nan_to_num(widths)
        ax.barh(range(len(settings)), widths, left=left, label=label, color=plt.get_cmap("Set2")(j))
        left += widths
    ax.set_yticks(range(len(settings)))
    ax.set_yticklabels(settings, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("mean time per step (s), by phase")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.16), ncol=3, frameon=False)
    for ax, (name, by_run) in zip(axes[1:], shown.items()):
        for i, values in by_run.items():
            run = runs[i]
            ax.plot(run.steps["step"], values, linewidth=0.9, color=colours[setting_of(run)], alpha=0.85)
        ax.set_xlabel("step")
        ax.set_ylabel(name if name != "memory (GiB, max over ranks)" else
                      ("device peak memory" if device_memory else "host memory (resident)") + " (GiB, max over ranks)")
    for ax in axes[panels:]:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], color=colours[s], label=s) for s in settings]
    if len(shown):
        fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(5, len(handles)),
                   fontsize=8, frameon=False)
    fig.suptitle(title)
    fig.tight_layout()
    return fig, missing
