#!/usr/bin/env python3
"""t5scale-bench against transformers (bench/hf_reference.py) on the same shapes, alternated in one run:
for every model and length pair, N rounds of (t5scale-bench, hf_reference.py), one after the other, so that both
see the same machine; the medians over the rounds of each side's tokens/s and their ratio, then the phases of the
round with the median throughput of each side.

    python bench/compare.py                      # CPU defaults: t5-small, t5-v1_1-small, tiny; fp32, batch 8, 128/32
    python bench/compare.py --models t5-v1_1-base,t5-v1_1-large --precision bf16 --micro-batch 32 \\
        --lengths 512/128,147/26 --device cuda --json results/bench/gpu.json

Both programs get the same options (model, precision, batch, lengths, steps, warmup, device, threads, optimizer,
checkpointing, seed); transformers' MFU uses the peak that t5scale-bench found for the device. Where transformers
runs out of memory at t5scale's micro-batch (fp32 weights, Adam state and autocast copies take more than t5scale's
bf16 weights), it gets the largest batch that fits, found by halving, for every round; both batches are reported
and tokens/s compared. The attention transformers actually ran (from torch.profiler, not its config's label) is
printed beside each row. --hf-compile adds transformers through torch.compile as a third side of every round, at
the batch eager transformers fitted, with its compile time apart from its step figures.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_report  # noqa: E402
from hf_reference import EXIT_OUT_OF_MEMORY  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="t5-small,t5-v1_1-small,tiny", help="comma-separated shapes")
    p.add_argument("--lengths", default="128/32", help="comma-separated source/target pairs, e.g. 512/128,147/26")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3, help="alternated runs of each side per shape")
    p.add_argument("--steps", type=int, default=5, help="timed steps per run")
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=2, help="CPU threads of both sides (0: torch's default)")
    p.add_argument("--optimizer", choices=["adamw", "adafactor"], default="adamw")
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--bench-bin", default=os.environ.get("T5SCALE_BENCH", os.path.join(REPO, "build/bin/t5scale-bench")))
    p.add_argument("--python", default=sys.executable, help="the interpreter with torch and transformers")
    p.add_argument("--reference", default=os.path.join(HERE, "hf_reference.py"),
                   help="the transformers side (bench/hf_reference.py)")
    p.add_argument("--hf-compile", action="store_true",
                   help="a third side: transformers through torch.compile (the Trainer's --torch_compile), in every "
                        "round after the other two, its compile time reported apart")
    p.add_argument("--json", help="write the comparison and every run's report here")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.steps < 1:
        p.error("--rounds and --steps must be at least 1")
    try:
        args.length_pairs = [tuple(int(x) for x in pair.split("/")) for pair in args.lengths.split(",")]
        assert all(len(pair) == 2 for pair in args.length_pairs)
    except (ValueError, AssertionError):
        p.error(f"--lengths: '{args.lengths}' is not a list of source/target pairs like 128/32,512/128")
    return args


def common_options(args, model, source, target):
    options = ["--model", model, "--precision", args.precision, "--micro-batch", str(args.micro_batch),
               "--source-length", str(source), "--target-length", str(target), "--steps", str(args.steps),
               "--warmup-steps", str(args.warmup_steps), "--device", args.device, "--threads", str(args.threads),
               "--optimizer", args.optimizer, "--seed", str(args.seed)]
    return options + (["--activation-checkpointing"] if args.activation_checkpointing else [])


def run(command, json_path, allow_out_of_memory=False):
    """The report of `command`, or None when it ran out of memory and that is allowed."""
    print("$ " + " ".join(command), flush=True)
    done = subprocess.run(command + ["--json", json_path], capture_output=True, text=True)
    if allow_out_of_memory and done.returncode == EXIT_OUT_OF_MEMORY:
        print(done.stderr.strip(), flush=True)
        return None
    if done.returncode != 0:
        sys.exit(f"compare.py: {command[0]} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    with open(json_path) as f:
        return json.load(f)


def with_micro_batch(options, micro_batch):
    at = options.index("--micro-batch")
    return options[:at + 1] + [str(micro_batch)] + options[at + 2:]


def reference_that_fits(command, options, micro_batch, json_path):
    """The transformers run at `micro_batch`, or at the largest half of it that fits: (report, micro_batch)."""
    while True:
        report = run(command + with_micro_batch(options, micro_batch), json_path, allow_out_of_memory=True)
        if report is not None:
            return report, micro_batch
        if micro_batch == 1:
            sys.exit("compare.py: transformers runs out of memory even at micro-batch 1")
        micro_batch //= 2
        print(f"compare.py: transformers does not fit; trying micro-batch {micro_batch}", flush=True)


def median_round(reports):
    """The report whose tokens/s is the median of the rounds (the lower middle for an even count)."""
    ordered = sorted(reports, key=lambda r: r["tokens_per_s"])
    return ordered[(len(ordered) - 1) // 2]


def main(argv=None):
    args = parse_args(argv)
    if not os.access(args.bench_bin, os.X_OK):
        sys.exit(f"compare.py: --bench-bin {args.bench_bin} is not an executable (build the t5scale-bench target)")
    results = []
    with tempfile.TemporaryDirectory(prefix="t5scale-compare-") as work:
        for model in args.models.split(","):
            for source, target in args.length_pairs:
                options = common_options(args, model, source, target)
                ours, theirs, compiled = [], [], []
                hf_batch = args.micro_batch
                for r in range(args.rounds):
                    ours.append(run([args.bench_bin] + options, os.path.join(work, f"t5scale-{r}.json")))
                    peak = ours[-1]["peak_flops_per_device"]
                    reference = [args.python, args.reference, "--bench-bin", args.bench_bin]
                    reference += (["--peak-flops", repr(peak)] if peak else [])
                    json_path = os.path.join(work, f"transformers-{r}.json")
                    if r == 0:  # the first round finds the batch that fits; the others run it
                        report, hf_batch = reference_that_fits(reference, options, hf_batch, json_path)
                    else:
                        report = run(reference + with_micro_batch(options, hf_batch), json_path)
                    theirs.append(report)
                    if args.hf_compile:  # at the batch that fitted eager transformers: compiling needs no more
                        warmup = ["--warmup-steps", str(max(args.warmup_steps, 1)), "--compile"]
                        compiled.append(run(reference + with_micro_batch(options, hf_batch) + warmup,
                                            os.path.join(work, f"transformers-compile-{r}.json")))
                t5scale_tps = bench_report.median([r["tokens_per_s"] for r in ours])
                hf_tps = bench_report.median([r["tokens_per_s"] for r in theirs])
                result = {"model": model, "source_length": source, "target_length": target,
                          "t5scale_micro_batch": args.micro_batch, "transformers_micro_batch": hf_batch,
                          "t5scale_tokens_per_s": t5scale_tps, "transformers_tokens_per_s": hf_tps,
                          "ratio": t5scale_tps / hf_tps, "t5scale_runs": ours, "transformers_runs": theirs,
                          "transformers_attention": median_round(theirs)["config"]["attention"]}
                if compiled:
                    compiled_tps = bench_report.median([r["tokens_per_s"] for r in compiled])
                    result.update({"transformers_compile_tokens_per_s": compiled_tps,
                                   "ratio_to_compiled": t5scale_tps / compiled_tps,
                                   "transformers_compile_s": bench_report.median([r["compile_s"] for r in compiled]),
                                   "transformers_compile_attention": median_round(compiled)["config"]["attention"],
                                   "transformers_compile_runs": compiled})
                results.append(result)

    print()
    print(f"{'model':<15} {'prec':<4} {'batch':>9} {'src/tgt':>9} | {'t5scale tok/s':>13} {'(runs)':<22} | "
          f"{'transformers tok/s':>18} {'(runs)':<22} | {'ratio':>6}")
    for r in results:
        runs = lambda key: "/".join(f"{x['tokens_per_s']:.0f}" for x in r[key])  # noqa: E731
        batches = f"{r['t5scale_micro_batch']}/{r['transformers_micro_batch']}"  # t5scale's / transformers'
        print(f"{r['model']:<15} {args.precision:<4} {batches:>9} "
              f"{str(r['source_length']) + '/' + str(r['target_length']):>9} | {r['t5scale_tokens_per_s']:>13.0f} "
              f"{runs('t5scale_runs'):<22} | {r['transformers_tokens_per_s']:>18.0f} {runs('transformers_runs'):<22} | "
              f"{r['ratio']:>5.2f}x")
    if any(r["transformers_micro_batch"] != r["t5scale_micro_batch"] for r in results):
        print("batch: t5scale's micro-batch / the largest that transformers fits (halved until it runs)")
    for r in results:
        print(f"{r['model']} {r['source_length']}/{r['target_length']}: transformers' attention that ran: "
              f"{r['transformers_attention']}")
        if "transformers_compile_runs" in r:
            compiled_runs = "/".join(f"{x['tokens_per_s']:.0f}" for x in r["transformers_compile_runs"])
            print(f"  with torch.compile: {r['transformers_compile_tokens_per_s']:.0f} tokens/s ({compiled_runs}), "
                  f"t5scale {r['ratio_to_compiled']:.2f}x; compile {r['transformers_compile_s']:.1f} s per run apart; "
                  f"attention: {r['transformers_compile_attention']}")
    print("\nPhases of the round with the median tokens/s of each side:")
    print(bench_report.table([median_round(r[k]) for r in results
                              for k in ("t5scale_runs", "transformers_runs", "transformers_compile_runs") if k in r]))
    if args.json:
        summary = {"schema": "t5scale-compare/1", "arguments": sys.argv[1:] if argv is None else list(argv),
                   "rounds": args.rounds, "results": results}
        bench_report.write_json(summary, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
