#!/usr/bin/env python3
"""t5scale-bench, bench/hf_reference.py and bench/compare.py run end to end on the tiny model on the CPU; their
JSON is checked as data (fields present and finite, figures consistent, both programs with the same keys, the
same parameter count and FLOPs: transformers' counted by FlopCounterMode, t5scale's from its cost model).

    check_bench_programs.py program|reference|compare --bench-bin build/bin/t5scale-bench --work DIR
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(REPO, "bench")
SHAPE = ["--model", "tiny", "--micro-batch", "4", "--source-length", "16", "--target-length", "8", "--threads", "1",
         "--dropout", "0.1"]
PHASES = ["forward_s", "backward_s", "comm_exposed_s", "optimizer_s"]


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def run(command, expect_ok=True):
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    if expect_ok and done.returncode != 0:
        fail(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done


def load(path):
    check(os.path.exists(path), f"{path} was not written")
    check(not os.path.exists(path + ".tmp"), f"{path}.tmp was left behind")
    with open(path) as f:
        return json.load(f)


def finite(value, name):
    check(isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value),
          f"{name} is {value!r}, not a finite number")


def check_report(r, steps, implementation):
    check(r["schema"] == "t5scale-bench/1", f"schema {r['schema']}")
    check(r["implementation"] == implementation, f"implementation {r['implementation']}")
    check(r["identity"]["device_type"] == "cpu" and r["identity"]["threads"] == 1, f"identity {r['identity']}")
    check(len(r["steps"]) == steps, f"{len(r['steps'])} steps reported, {steps} timed")
    for s in r["steps"]:
        for key in PHASES + ["other_s", "total_s", "loss"]:
            finite(s[key], key)
        check(sum(s[k] for k in PHASES) <= s["total_s"] + 1e-9, f"phases exceed the step: {s}")
    tokens = 4 * (16 + 8)
    check(r["tokens_per_step"] == tokens, f"tokens_per_step {r['tokens_per_step']} != {tokens}")
    step_s = r["median"]["total_s"]
    check(math.isclose(r["tokens_per_s"], tokens / step_s, rel_tol=1e-12), "tokens_per_s != tokens / median step")
    check(math.isclose(r["samples_per_s"], 4 / step_s, rel_tol=1e-12), "samples_per_s != rows / median step")
    finite(r["model_flops_per_step"], "model_flops_per_step")
    check(math.isclose(r["model_tflops_per_s"], r["model_flops_per_step"] / step_s / 1e12, rel_tol=1e-12),
          "model_tflops_per_s != FLOPs / median step")
    check(r["memory"]["peak_bytes"] > 0, f"memory {r['memory']}")


# What only the transformers side reports: how it was compiled, and the attention its profiler saw beside the label
# of its config (config.attention, which both have, is what ran).
TRANSFORMERS_ONLY = {"compile_s", "attention_configured", "attention_operators", "attention_kernels", "compile"}


def key_tree(value):
    """The keys of nested objects (lists by their first element), to compare two reports' schemas."""
    if isinstance(value, dict):
        return {k: key_tree(v) for k, v in value.items() if k != "model_config" and k not in TRANSFORMERS_ONLY}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [key_tree(value[0])]
    return None


def bench_report(args, extra, name):
    path = os.path.join(args.work, name)
    run([args.bench_bin] + SHAPE + extra + ["--json", path])
    return load(path)


def check_program(args):
    r = bench_report(args, ["--steps", "2", "--warmup-steps", "1"], "t5scale.json")
    check_report(r, 2, "t5scale")
    check(r["identity"]["arguments"][:2] == ["--model", "tiny"], f"arguments {r['identity']['arguments']}")
    # The commit of the checkout the program was built from (read at build time, not when cmake configured; a
    # "-dirty" suffix says whether tracked files differed then, which other tests may have changed since).
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        built = r["identity"]["git_revision"]
        check(built.removesuffix("-dirty") == head.stdout.strip(),
              f"git revision {built}, but the checkout is at {head.stdout.strip()}")
    else:
        check(r["identity"]["git_revision"] == "unknown", f"git revision {r['identity']['git_revision']} outside git")

    shard = bench_report(args, ["--steps", "1", "--warmup-steps", "0", "--tp-shard", "2"], "shard.json")
    check_report(shard, 1, "t5scale")
    check(any(n.startswith("communication excluded (tp-shard 2)") for n in shard["notes"]), f"notes {shard['notes']}")
    check(shard["config"]["parameters"] < r["config"]["parameters"], "a TP=2 shard holds fewer parameters")
    check(math.isclose(shard["model_flops_per_step"], r["model_flops_per_step"] / 2, rel_tol=1e-12),
          "a TP=2 shard does half the model FLOPs")

    config = json.loads(run([args.bench_bin, "--print-model-config", "--model", "tiny"]).stdout)
    check(config["vocab_size"] == 32 and config["d_model"] == 64, f"tiny's config {config}")

    bad = run([args.bench_bin, "--model", "t5-smal", "--steps", "1"], expect_ok=False)
    check(bad.returncode == 2, f"an unknown model exits {bad.returncode}")
    check("unknown model 't5-smal'" in bad.stderr and "did you mean 't5-small'" in bad.stderr, bad.stderr)
    bad = run([args.bench_bin, "--micro-batchs", "4"], expect_ok=False)
    check(bad.returncode == 2 and "did you mean '--micro-batch'" in bad.stderr, bad.stderr)
    rates = os.path.join(args.work, "rates.json")
    for words, message in ((["--calibrate", rates, "--calibrate-passes", "0"], "--calibrate-passes must be at least 1"),
                           (["--calibrate-passes", "1"], "--calibrate-passes needs --calibrate FILE")):
        bad = run([args.bench_bin] + words, expect_ok=False)
        check(bad.returncode == 2 and message in bad.stderr and not os.path.exists(rates), f"{words}: {bad.stderr}")


def check_reference(args):
    steps = ["--steps", "2", "--warmup-steps", "1"]
    ours = bench_report(args, steps, "t5scale.json")
    path = os.path.join(args.work, "transformers.json")
    run([sys.executable, os.path.join(BENCH, "hf_reference.py"), "--bench-bin", args.bench_bin] + SHAPE + steps
        + ["--json", path])
    theirs = load(path)
    check_report(theirs, 2, "transformers")
    check(key_tree(ours) == key_tree(theirs), f"the two reports' keys differ:\n{key_tree(ours)}\n{key_tree(theirs)}")
    check(theirs["config"]["model_config"] == ours["config"]["model_config"], "the two built different shapes")
    check(theirs["config"]["parameters"] == ours["config"]["parameters"],
          f"parameters: transformers {theirs['config']['parameters']}, t5scale {ours['config']['parameters']}")
    # FlopCounterMode on transformers' step against t5scale's cost model: both count 2mnk per matrix product.
    check(math.isclose(theirs["model_flops_per_step"], ours["model_flops_per_step"], rel_tol=1e-12),
          f"FLOPs: transformers {theirs['model_flops_per_step']}, t5scale {ours['model_flops_per_step']}")
    check(theirs["config"]["dropout_rate"] == ours["config"]["dropout_rate"] == 0.1, "dropout differs")
    # The attention that ran, as the profiler saw it: transformers' eager T5Attention (a softmax per attention layer:
    # tiny's encoder self-attention, decoder self- and cross-attention, one layer each) on this CPU.
    check(theirs["config"]["attention"] == "eager (matmul, softmax)", f"attention {theirs['config']['attention']}")
    check(theirs["config"]["attention_operators"].get("aten::softmax", 0) >= 3,
          f"attention operators {theirs['config']['attention_operators']}")
    check(theirs["compile_s"] is None and theirs["config"]["compile"] is False, "compiled without --compile")

    bad = run([sys.executable, os.path.join(BENCH, "hf_reference.py"), "--bench-bin", args.bench_bin,
               "--model", "t5-smal"], expect_ok=False)
    check(bad.returncode != 0 and "unknown model 't5-smal'" in bad.stderr, bad.stderr)


def check_compare(args):
    path = os.path.join(args.work, "compare.json")
    run([sys.executable, os.path.join(BENCH, "compare.py"), "--bench-bin", args.bench_bin, "--models", "tiny",
         "--micro-batch", "4", "--lengths", "16/8", "--threads", "1", "--rounds", "2", "--steps", "1",
         "--warmup-steps", "0", "--json", path])
    summary = load(path)
    check(len(summary["results"]) == 1, f"{len(summary['results'])} results for one shape")
    result = summary["results"][0]
    for side, implementation in (("t5scale_runs", "t5scale"), ("transformers_runs", "transformers")):
        check(len(result[side]) == 2, f"{side}: {len(result[side])} runs in 2 rounds")
        for r in result[side]:
            check_report(r, 1, implementation)
    median = lambda runs: sum(r["tokens_per_s"] for r in runs) / 2  # noqa: E731  (the median of two)
    check(math.isclose(result["t5scale_tokens_per_s"], median(result["t5scale_runs"]), rel_tol=1e-12), "t5scale median")
    check(math.isclose(result["transformers_tokens_per_s"], median(result["transformers_runs"]), rel_tol=1e-12),
          "transformers median")
    check(math.isclose(result["ratio"], result["t5scale_tokens_per_s"] / result["transformers_tokens_per_s"],
                       rel_tol=1e-12), "ratio")
    check(result["t5scale_micro_batch"] == result["transformers_micro_batch"] == 4, "the batches differ")

    # transformers out of memory above micro-batch 1 (a stand-in that says so as hf_reference.py does on a GPU):
    # compare.py halves its batch until it runs, keeps it for every round, and reports both batches. At micro-batch 1
    # the stand-in reports the transformers run above, as run at that batch: the halving is compare.py's, and what
    # hf_reference.py measures was checked above (a real run here would only import transformers twice more).
    measured = os.path.join(args.work, "transformers_report.json")
    with open(measured, "w") as f:
        json.dump(result["transformers_runs"][0], f)
    small = os.path.join(args.work, "reference_fits_one_row.py")
    with open(small, "w") as f:
        f.write(f"""import json, sys
sys.path.insert(0, {BENCH!r})
import hf_reference
rows = int(sys.argv[sys.argv.index("--micro-batch") + 1])
if rows > 1:
    print(f"hf_reference.py: out of memory: CUDA out of memory at micro-batch {{rows}}", file=sys.stderr)
    sys.exit(hf_reference.EXIT_OUT_OF_MEMORY)
with open({measured!r}) as f:
    report = json.load(f)
report["config"]["micro_batch"] = rows
with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
    json.dump(report, f)
""")
    path = os.path.join(args.work, "compare_halved.json")
    done = run([sys.executable, os.path.join(BENCH, "compare.py"), "--bench-bin", args.bench_bin, "--models", "tiny",
                "--micro-batch", "4", "--lengths", "16/8", "--threads", "1", "--rounds", "2", "--steps", "1",
                "--warmup-steps", "0", "--reference", small, "--json", path])
    result = load(path)["results"][0]
    check(result["t5scale_micro_batch"] == 4 and result["transformers_micro_batch"] == 1,
          f"batches {result['t5scale_micro_batch']} and {result['transformers_micro_batch']}, expected 4 and 1")
    check(all(r["config"]["micro_batch"] == 1 for r in result["transformers_runs"]), "a transformers round at another batch")
    check(all(r["config"]["micro_batch"] == 4 for r in result["t5scale_runs"]), "a t5scale round at another batch")
    check("trying micro-batch 2" in done.stdout and "trying micro-batch 1" in done.stdout and
          "      4/1" in done.stdout, done.stdout[-2000:])

    # hf_reference.py itself: torch's out-of-memory error becomes one line and the exit code compare.py reads.
    sys.path.insert(0, BENCH)
    import hf_reference
    import torch

    def out_of_memory(argv=None):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore lines")
    hf_reference.main = out_of_memory
    check(hf_reference.main_reporting_out_of_memory([]) == hf_reference.EXIT_OUT_OF_MEMORY, "not the out-of-memory exit")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("check", choices=["program", "reference", "compare"])
    p.add_argument("--bench-bin", required=True)
    p.add_argument("--work", required=True)
    args = p.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    {"program": check_program, "reference": check_reference, "compare": check_compare}[args.check](args)
    shutil.rmtree(args.work)
    print(f"PASS: {args.check}")


if __name__ == "__main__":
    main()
