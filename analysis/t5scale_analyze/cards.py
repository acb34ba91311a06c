"""The resource usage card of a run, after the model cards that report run duration, compute cost at
low-priority and dedicated prices, GPU memory average/peak, total GPU energy, emissions, throughput and total
FLOPs. Built from a row of the runs table, so from the run file alone."""

from __future__ import annotations

import math

import pandas as pd

from .runfile import cpu_only, metric_label

GIB = 1024.0 ** 3


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _known(value) -> bool:
    return math.isfinite(_number(value))


def _fmt(value, spec: str) -> str:
    """A number in the given format, "unknown" when it is NaN or missing."""
    return format(_number(value), spec) if _known(value) else "unknown"


def format_duration(seconds) -> str:
    """43m 51.05s, 1h 02m 03.00s, 7.25s."""
    s = _number(seconds)
    if not math.isfinite(s):
        return "unknown"
    s = round(s, 2)  # 59.999 s is 1m 00.00s, not 60.00s
    hours, rest = divmod(s, 3600.0)
    minutes, secs = divmod(rest, 60.0)
    if hours >= 1:
        return f"{int(hours)}h {int(minutes):02d}m {secs:05.2f}s"
    if minutes >= 1:
        return f"{int(minutes)}m {secs:05.2f}s"
    return f"{secs:.2f}s"


def _gib(value) -> str:
    return f"{_number(value) / GIB:.2f}" if _known(value) else "?"


def _several_files(row: pd.Series) -> bool:
    """Whether the run's attempts wrote files on more than one grid (joined into this row)."""
    return _number(row.get("attempt_files")) > 1


def _money(value) -> str:
    return "$" + _fmt(value, ".2f") if _known(value) else "unknown"


def _cost_line(row: pd.Series) -> str:
    """Both costs on the node-hours charged: the nodes x the share of each the run held (1 of 4 GPUs: a quarter);
    the dedicated one at a price per GPU-hour where the run had one. Unknown, never $0, without a price."""
    node_price = _number(row.get("price_per_node_hour_usd"))
    gpu_price = _number(row.get("price_per_gpu_hour_usd"))
    low_price = _number(row.get("low_priority_price_per_node_hour_usd"))
    low = _money(row.get("cost_low_priority_usd")) if low_price > 0 else "not priced"
    dedicated = _money(row.get("cost_usd")) if node_price > 0 or gpu_price > 0 else "not priced"
    prices = (f"{low_price:g}" if low_price > 0 else "-") + "/" + (f"{node_price:g}" if node_price > 0 else "-")
    nodes = (f"{row.get('attempt_nodes')} node(s) per grid" if _several_files(row) else f"{row.get('nodes')} node(s)")
    share = _number(row.get("node_share_fraction")) if "node_share_fraction" in row else 1.0
    if share != 1.0:
        basis = row.get("node_share_basis")
        nodes += f" x {_fmt(share, '.4g')} of each" + (f" ({basis})" if isinstance(basis, str) and basis else "")
    text = (f"{low}/{dedicated} (USD) at {prices} USD per node-hour x {nodes} "
            f"= {_fmt(row.get('charged_node_hours', row.get('node_hours')), '.4g')} node-hours")
    if gpu_price > 0:
        text += f"; dedicated at {gpu_price:g} USD per GPU-hour"
    return text


def _attempts_line(row: pd.Series) -> str:
    """The run's attempts and the grids they ran on, one file per grid."""
    worlds = str(row.get("attempt_world_sizes", "")).split(",")
    nodes = str(row.get("attempt_nodes", "")).split(",")
    steps = str(row.get("attempt_steps", "")).split(",")
    grids = "; ".join(f"world size {w} on {n} node(s), steps {st}" for w, n, st in zip(worlds, nodes, steps))
    text = f"{row.get('attempts')} attempt(s) in {len(worlds)} run file(s): {grids}"
    if _several_files(row):
        text += " (time, cost and energy of every grid)"
    if _unjoined(row):
        text += f"; not joined: {_unjoined(row)}"
    return text


def _unjoined(row: pd.Series) -> str:
    value = row.get("unjoined_files")
    return value if isinstance(value, str) else ""


def _energy_line(row: pd.Series) -> str:
    if not _known(row.get("gpu_energy_kj")):
        return f"not measured (energy_source_gpu: {row.get('energy_source_gpu', '?')})"
    return f"{_number(row.get('gpu_energy_kj')):.2f} (kJ) from {row.get('energy_source_gpu', '?')}"


def _total_energy_line(row: pd.Series) -> str:
    if not _known(row.get("energy_kwh")):
        if _known(row.get("estimated_energy_kwh")):
            return (f"not measured; estimated {_number(row.get('estimated_energy_kwh')):.4g} kWh "
                    f"({row.get('energy_estimate_method', '')})")
        return "not measured"
    cpu = "CPU " + ("measured" if _known(row.get("cpu_energy_kwh")) else "not measured")
    return f"{_number(row.get('energy_kwh')):.4g} kWh (GPU + CPU, x PUE {_number(row.get('pue')):g}; {cpu})"


def _emissions_line(row: pd.Series) -> str:
    """Measured emissions; where nothing was measured "unknown", with the estimate beside it when there is one."""
    intensity = f"at {_number(row.get('carbon_intensity_g_per_kwh')):g} g/kWh"
    if _known(row.get("co2_kg")):
        return f"{_number(row.get('co2_kg')):.4g} (kg CO2eq {intensity})"
    if _known(row.get("estimated_co2_kg")):
        return f"unknown (energy not measured); estimated {_number(row.get('estimated_co2_kg')):.4g} (kg CO2eq {intensity})"
    return "unknown (energy not measured)"


def _metric_line(row: pd.Series, metric: str) -> str:
    final, best, step = row.get(f"final_{metric}"), row.get(f"best_{metric}"), row.get(f"best_{metric}_step")
    if not _known(best):
        return "not evaluated"
    return f"{_number(final):.4g} / {_number(best):.4g} (best at step {int(_number(step))})"


def _memory_rows(row: pd.Series) -> list:
    host = ("Host Memory (Peak)", f"{_gib(row.get('peak_host_memory_bytes'))} (GiB; peak resident set, max over ranks)")
    if cpu_only(row.get("device_names", "")):
        return [("Device Memory", "none (CPU ranks)"), host]
    return [("GPU Memory Usage (Avg/Peak)", f"{_gib(row.get('mean_memory_allocated_bytes'))}/"
                                            f"{_gib(row.get('peak_memory_bytes'))} (GiB; peak = max over ranks; "
                                            f"predicted {_gib(row.get('predicted_memory_bytes_per_device'))})"), host]


def card_rows(row: pd.Series, metric: str | None) -> list:
    """(key, value) pairs of a run's resource card."""
    devices = sorted({d.strip() for d in str(row.get("device_names", "")).split(",") if d.strip()})
    per_node = "CPU rank(s)" if cpu_only(row.get("device_names", "")) else "GPU(s)"
    # the attempt counted from 1 over every file of the run, as the runs table's `attempts` (its `attempt` column
    # is the same index from 0)
    attempts = _number(row.get("attempts"))
    status = f"{row.get('status')}" + (f" (attempt {int(attempts)})" if attempts > 1 else "")
    if row.get("status") == "failed" and row.get("error"):
        status += f": {row.get('error')} (after step {row.get('error_step')})"
    rows = [
        ("Run", f"{row.get('run_id')} (study {row.get('study') or '-'})"),
        ("Status", status),
        *([("Attempts", _attempts_line(row))] if _several_files(row) or _unjoined(row) else []),
        ("Hardware", f"{row.get('nodes')} node(s) x {row.get('gpus_per_node')} {per_node} = {row.get('world_size')} "
                     f"ranks (tp {row.get('tp')} x dp {row.get('dp')}); {', '.join(devices) or 'device unknown'}"
                     + ("; the newest attempt's grid" if _several_files(row) else "")),
        ("Model", f"{row.get('model_name')} ({_number(row.get('parameter_count')) / 1e6:.1f}M parameters), "
                  f"{row.get('precision')}, {row.get('optimizer')}"),
        ("Batch and LR", f"global {row.get('global_batch')} (micro {row.get('micro_batch')} x accumulation "
                         f"{row.get('grad_accumulation')} x dp {row.get('dp')}); lr {_number(row.get('effective_lr')):g} "
                         f"(rule {row.get('lr_scaling_rule')}, base {_number(row.get('base_lr')):g})"),
        ("Steps", f"{row.get('steps_completed')} of {row.get('max_steps')}"
                  + (f" (epoch {_number(row.get('last_epoch')):.2f})" if _known(row.get("last_epoch")) else "")),
        ("Run Duration", f"{format_duration(row.get('wall_time_s'))} (training {format_duration(row.get('train_time_s'))}, "
                         f"evaluation {format_duration(row.get('eval_time_s'))})"),
        ("Compute Cost (LowPriority/Dedicated)", _cost_line(row)),
        *_memory_rows(row),
        ("Mean GPU Power", f"{_number(row.get('mean_gpu_power_w')):.1f} (W per GPU)" if _known(row.get("mean_gpu_power_w"))
                           else "not measured"),
        ("Total GPU Energy Usage", _energy_line(row)),
        ("Total Energy", _total_energy_line(row)),
        ("Emissions", _emissions_line(row)),
        ("Throughput", f"{_fmt(row.get('samples_per_s'), '.2f')} samples/s, {_fmt(row.get('tokens_per_s'), '.0f')} tokens/s"),
        ("Mean Step Time", f"{_fmt(row.get('mean_step_time_s'), '.4g')} s"),
        ("MFU", f"{100 * _number(row.get('mean_mfu')):.1f}%" if _known(row.get("mean_mfu"))
                else "unknown (no peak FLOPs known for the device: telemetry.peak_flops_per_device sets one)"),
        ("Total FLOPs", _fmt(row.get("total_flops"), ".4g")),
    ]
    if metric is not None:
        rows.append((f"{metric_label(metric)} (final/best)", _metric_line(row, metric)))
    if row.get("notes"):
        rows.append(("Notes", str(row.get("notes"))))
    return rows


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def card_markdown(row: pd.Series, metric: str | None) -> str:
    lines = [f"### {row.get('run_id')}", "", "| key | value |", "| --- | ----- |"]
    lines += [f"| {_cell(k)} | {_cell(v)} |" for k, v in card_rows(row, metric)]
    return "\n".join(lines) + "\n"


def cards_markdown(runs: pd.DataFrame, metric: str | None) -> str:
    parts = ["# Resource usage cards", ""]
    parts += [card_markdown(row, metric) for _, row in runs.iterrows()]
    return "\n".join(parts)
