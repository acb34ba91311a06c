"""What bench/hf_reference.py and bench/compare.py share: the t5scale-bench/1 JSON schema's keys, its table, the
median, and writing a JSON file without leaving a half-written one."""

import json
import os
import statistics

SCHEMA = "t5scale-bench/1"
# Per-step timing fields, in table order; other_s is the step's time outside the four phases.
PHASE_KEYS = ["forward_s", "backward_s", "comm_exposed_s", "optimizer_s", "other_s", "total_s"]


def median(values):
    return statistics.median(values)


def summarise_steps(steps):
    """median and min of every phase over the timed steps."""
    return ({k: median([s[k] for s in steps]) for k in PHASE_KEYS},
            {k: min(s[k] for s in steps) for k in PHASE_KEYS})


def write_json(report, path):
    temporary = path + ".tmp"
    with open(temporary, "w") as out:
        json.dump(report, out, indent=2)
        out.write("\n")
    os.replace(temporary, path)


def _fixed(value, fmt, scale=1.0):
    return "n/a" if value is None else fmt % (value * scale)


def table(reports):
    """One row per report, phases in milliseconds with their share of the step, then each report's notes."""
    header = (f"{'impl':<12} {'model':<15} {'prec':<4} {'batch':>5} {'src/tgt':>9} {'tp':>3} | "
              f"{'forward ms':<13} {'backward ms':<13} {'comm ms':<13} {'optimizer ms':<13} {'other ms':<13} | "
              f"{'step ms':>9} {'min ms':>9} | {'tokens/s':>9} {'samp/s':>8} {'TFLOP/s':>8} {'MFU':>6} | "
              "peak GiB above start (predicted)")
    lines = [header]
    gib = 1.0 / 2**30
    for r in reports:
        c, m, memory = r["config"], r["median"], r["memory"]
        phases = [f"{m[k] * 1e3:.1f} ({m[k] / m['total_s'] * 100:.0f}%)" for k in PHASE_KEYS[:5]]
        lines.append(
            f"{r['implementation']:<12} {c['model']:<15} {c['precision']:<4} {c['micro_batch']:>5} "
            f"{str(c['source_length']) + '/' + str(c['target_length']):>9} {c['tp_shard']:>3} | "
            + " ".join(f"{p:<13}" for p in phases)
            + f" | {m['total_s'] * 1e3:>9.1f} {r['min']['total_s'] * 1e3:>9.1f} | {r['tokens_per_s']:>9.0f} "
            f"{r['samples_per_s']:>8.1f} {_fixed(r['model_tflops_per_s'], '%.3f'):>8} "
            f"{_fixed(r['mfu'], '%.1f%%', 100.0):>6} | {_fixed(memory['peak_bytes'] - memory['start_bytes'], '%.2f', gib)} "
            f"({_fixed(memory['predicted_bytes'], '%.2f', gib)})")
    for r in reports:
        who = f"{r['implementation']} {r['config']['model']}"
        ident = r["identity"]
        peak = _fixed(r["peak_flops_per_device"], "%.1f", 1e-12)
        line = (f"  {who}: device {ident['device']}, {ident['threads']} threads; {r['config']['precision_detail']}; "
                f"peak {peak} TFLOP/s ({r['peak_flops_source']})")
        if r["matmul"]:
            line += f", measured {r['matmul']['n']}^3 matmul {r['matmul']['tflops_per_s']:.3f} TFLOP/s"
        lines.append(line + f"; memory: {r['memory']['measured']}")
        lines += [f"  {who}: {note}" for note in r["notes"]]
    return "\n".join(lines)
