#!/usr/bin/env python3
"""The reference for t5scale-bench: the same training steps through Hugging Face transformers'
T5ForConditionalGeneration, as its Trainer runs them, timed the same way and reported in the same JSON schema.

    python bench/hf_reference.py --model t5-small --micro-batch 8 --source-length 128 --target-length 32 \\
        --threads 2 --json hf.json

The options that both programs have mean the same; the shape comes from t5scale-bench itself
(--print-model-config), so both build the same model. What a step is here, as the Trainer does it:
  - model: built from the config with random initialisation (transformers' _init_weights), in train mode, dropout
    as the config has it (named shapes 0.1, tiny 0, or --dropout);
  - precision: fp32; bf16 / fp16 as the Trainer's --bf16 / --fp16: fp32 weights, forward under torch.autocast,
    fp16 with a GradScaler (t5scale: bf16/fp16 weights and compute, fp32 master weights and optimizer);
  - optimizer: torch.optim.AdamW, fused (the Trainer's default, adamw_torch_fused, with torch >= 2.8; --adamw-impl
    to change), weight decay 0.01 on every parameter but the norms and the position bias (t5scale's rule, and the Trainer's
    grouping for T5); or
    transformers' Adafactor with a fixed learning rate; gradients clipped to norm 1.0; zero_grad after the step;
  - inputs: random token ids of exactly the given lengths, no padding, moved to the device in the forward phase.
  - --compile: the model through torch.compile (inductor, the Trainer's --torch_compile), compiled by the first
    warmup step, whose time beyond a compiled step is reported apart as compile_s.
Phases: forward (with the loss), backward, optimizer (unscale, clip, step, zero_grad); on CUDA the device is
synchronised at each boundary. The attention that ran is read from one more step under torch.profiler, by the
operators and kernels it recorded (config.attention; the config's own label is config.attention_configured):
transformers' T5 may go through SDPA whatever the label says, and inductor may replace the eager product and
softmax by a fused kernel. Model FLOPs are counted by torch's FlopCounterMode on one untimed training step
(before activation checkpointing is switched on, so recomputation is not counted: model FLOPs, as t5scale's cost
model counts them).
"""

import argparse
import datetime
import json
import os
import resource
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_report  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The exit code of a run whose micro-batch does not fit the device: compare.py then halves it and tries again.
EXIT_OUT_OF_MEMORY = 3


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="t5-small", help="tiny or a named shape, as t5scale-bench takes it")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--source-length", type=int, default=128)
    p.add_argument("--target-length", type=int, default=32)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:K or auto")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    p.add_argument("--activation-checkpointing", action="store_true",
                   help="model.gradient_checkpointing_enable() (every block)")
    p.add_argument("--optimizer", choices=["adamw", "adafactor"], default="adamw")
    p.add_argument("--adamw-impl", choices=["fused", "foreach", "for-loop"], default="fused",
                   help="torch.optim.AdamW's implementation (fused: the Trainer's default)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--dropout", type=float, default=None, help="dropout (default: the shape's own)")
    p.add_argument("--vocab-size", type=int, default=None, help="vocabulary of tiny")
    p.add_argument("--peak-flops", type=float, default=None,
                   help="the device's peak FLOP/s for MFU (compare.py passes t5scale-bench's table figure)")
    p.add_argument("--matmul-peak", action="store_true", help="also measure a large matmul's TFLOP/s")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (the Trainer's --torch_compile); compile time reported apart")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--json", help="write every figure as JSON (schema t5scale-bench/1)")
    p.add_argument("--model-config", help="a config.json to use instead of asking t5scale-bench for --model")
    p.add_argument("--bench-bin", default=os.environ.get("T5SCALE_BENCH", os.path.join(REPO, "build/bin/t5scale-bench")),
                   help="t5scale-bench, for the shape of --model ($T5SCALE_BENCH or build/bin/t5scale-bench)")
    args = p.parse_args(argv)
    for name in ["micro_batch", "source_length", "target_length", "steps"]:
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.warmup_steps < 0:
        p.error(f"--warmup-steps must be at least 0, got {args.warmup_steps}")
    if args.compile and args.warmup_steps < 1:
        p.error("--compile needs --warmup-steps 1 or more: the first step compiles")
    return args


def model_config_json(args):
    """The shape as t5scale-bench resolves it (the same names, dropout and tiny vocabulary, the same errors)."""
    if args.model_config:
        with open(args.model_config) as f:
            return json.load(f)
    if not os.access(args.bench_bin, os.X_OK):
        sys.exit(f"hf_reference.py: --bench-bin {args.bench_bin} is not an executable t5scale-bench "
                 "(build it, or pass --model-config)")
    command = [args.bench_bin, "--print-model-config", "--model", args.model]
    if args.dropout is not None:
        command += ["--dropout", str(args.dropout)]
    if args.vocab_size is not None:
        command += ["--vocab-size", str(args.vocab_size)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"hf_reference.py: {done.stderr.strip()}")
    return json.loads(done.stdout)


def cpu_model_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def resident_set_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def driver_version():
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
        return done.stdout.splitlines()[0].strip() if done.returncode == 0 and done.stdout else None
    except (OSError, subprocess.TimeoutExpired):
        return None


# The operators by which an attention shows in torch.profiler, the first found naming it: SDPA's backends, then the
# eager path's softmax (transformers' T5Attention: matmul, softmax, matmul).
ATTENTION_OPERATORS = [
    ("aten::_scaled_dot_product_flash_attention", "sdpa: flash"),
    ("aten::_scaled_dot_product_efficient_attention", "sdpa: efficient"),
    ("aten::_scaled_dot_product_cudnn_attention", "sdpa: cudnn"),
    ("aten::_scaled_dot_product_attention_math", "sdpa: math"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "sdpa: flash (cpu)"),
    ("aten::_efficient_attention_forward", "sdpa: efficient"),
    ("aten::_flash_attention_forward", "sdpa: flash"),
]
ATTENTION_KERNEL_WORDS = ("fmha", "flash", "attention", "attn", "cudnn_sdpa", "softmax")


def attention_that_ran(step, cuda):
    """What one call of step() ran for attention, from torch.profiler: {"attention", "operators", "kernels"}."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as recorded:
        step()
    names, device_kernels = {}, set()
    for event in recorded.events():
        names[event.name] = names.get(event.name, 0) + 1
        if event.device_type == torch.autograd.DeviceType.CUDA:
            device_kernels.add(event.name)
    found = sorted({label for op, label in ATTENTION_OPERATORS for name in names if name.startswith(op)})
    if not found and any(n in names for n in ("aten::softmax", "aten::_softmax")):
        found = ["eager (matmul, softmax)"]
    elif not found:  # torch.compile: inductor's generated kernels replaced the ATen operators
        found = ["no ATen attention operator ran (generated kernels" + (": see attention_kernels)" if cuda else ")")]
    operators = {n: c for n, c in names.items() if n.startswith(("aten::_scaled_dot", "aten::scaled_dot",
                                                                 "aten::_efficient_att", "aten::_flash_att",
                                                                 "aten::softmax", "aten::_softmax"))}
    kernels = sorted(n for n in device_kernels if any(w in n.lower() for w in ATTENTION_KERNEL_WORDS))
    return {"attention": "; ".join(found), "operators": operators, "kernels": kernels[:12]}


def git_revision():
    done = subprocess.run(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def main(argv=None):
    args = parse_args(argv)
    config_json = model_config_json(args)

    import torch
    import transformers
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import T5Config, T5ForConditionalGeneration

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"hf_reference.py: --device {args.device}: torch sees no CUDA device")
    cuda = device.type == "cuda"

    def synchronize():
        if cuda:
            torch.cuda.synchronize(device)

    # What the process held before the model: allocated device memory, or the resident set on the CPU.
    start_bytes = torch.cuda.memory_allocated(device) if cuda else resident_set_bytes()
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(args.seed)
    config = T5Config(**{k: v for k, v in config_json.items() if k not in ("architectures", "model_type")})
    config.use_cache = False  # training: no key/value cache (the Trainer turns it off with checkpointing too)
    model = T5ForConditionalGeneration(config).to(device)
    model.train()
    parameters = sum(p.numel() for p in model.parameters())  # shared tensors counted once

    generator = torch.Generator().manual_seed(args.seed)
    vocab = config.vocab_size
    input_ids = torch.randint(2, vocab, (args.micro_batch, args.source_length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    labels = torch.randint(2, vocab, (args.micro_batch, args.target_length), generator=generator)

    autocast_dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]

    def forward_loss():
        batch = {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device),
                 "labels": labels.to(device)}
        if autocast_dtype is None:
            return model(**batch).loss
        with torch.autocast(device_type=device.type, dtype=autocast_dtype):
            return model(**batch).loss

    # Model FLOPs of one training step (forward + backward), before checkpointing could add recomputation.
    with FlopCounterMode(display=False) as counter:
        forward_loss().backward()
    model_flops = float(counter.get_total_flops())
    model.zero_grad(set_to_none=True)
    if args.activation_checkpointing:
        model.gradient_checkpointing_enable()
    if args.compile:
        model = torch.compile(model)  # as the Trainer's --torch_compile (inductor, default mode)

    if args.optimizer == "adamw":
        # Norms and the position bias get no weight decay: t5scale's rule (weight_decay_applies: no "norm", no
        # "bias" in the name), which is also the Trainer's grouping for T5 (checked against transformers 4.57's
        # Trainer.get_decay_parameter_names), written out so that it does not depend on the Trainer's internals.
        decay = {name for name, _ in model.named_parameters() if "norm" not in name and "bias" not in name}
        groups = [
            {"params": [p for n, p in model.named_parameters() if n in decay], "weight_decay": 0.01},
            {"params": [p for n, p in model.named_parameters() if n not in decay], "weight_decay": 0.0},
        ]
        impl = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}[args.adamw_impl]
        optimizer = torch.optim.AdamW(groups, lr=args.lr, **impl)
        optimizer_detail = f"torch.optim.AdamW ({args.adamw_impl}), weight decay 0.01 on every parameter but the norms"
        weight_decay = 0.01
    else:
        optimizer = transformers.optimization.Adafactor(model.parameters(), lr=args.lr, relative_step=False,
                                                        scale_parameter=False, warmup_init=False)
        optimizer_detail = "transformers Adafactor (fixed learning rate, no parameter scaling)"
        weight_decay = 0.0
    scaler = torch.amp.GradScaler(device.type) if args.precision == "fp16" else None

    steps = []
    first_step_s = None
    for i in range(args.warmup_steps + args.steps):
        synchronize()
        start = time.perf_counter()
        loss = forward_loss()
        synchronize()
        t_forward = time.perf_counter()
        (scaler.scale(loss) if scaler else loss).backward()
        synchronize()
        t_backward = time.perf_counter()
        skipped = False
        if scaler:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if scaler:
            scale = scaler.get_scale()
            scaler.step(optimizer)
            scaler.update()
            skipped = scaler.get_scale() < scale
        else:
            optimizer.step()
        model.zero_grad(set_to_none=True)
        synchronize()
        end = time.perf_counter()
        if i == 0:
            first_step_s = end - start
        if i < args.warmup_steps:
            continue
        phases = {"forward_s": t_forward - start, "backward_s": t_backward - t_forward, "comm_exposed_s": 0.0,
                  "optimizer_s": end - t_backward}
        total = end - start
        steps.append({**phases, "other_s": max(total - sum(phases.values()), 0.0), "total_s": total,
                      "loss": loss.item(), "skipped": skipped,
                      # t5scale-bench's phase peaks come from its CPU allocator; here there is none to ask
                      "peak_bytes": {"forward": None, "backward": None, "optimizer": None}})

    median, minimum = bench_report.summarise_steps(steps)

    def untimed_step():
        forward_loss().backward()
        model.zero_grad(set_to_none=True)
    ran = attention_that_ran(untimed_step, cuda)
    compile_s = max(first_step_s - median["total_s"], 0.0) if args.compile else None
    tokens = args.micro_batch * (args.source_length + args.target_length)
    step_s = median["total_s"]
    peak = args.peak_flops
    report = {
        "schema": bench_report.SCHEMA,
        "implementation": "transformers+compile" if args.compile else "transformers",
        "identity": {
            "device": torch.cuda.get_device_name(device) if cuda else cpu_model_name(),
            "device_type": device.type,
            "torch_version": torch.__version__,
            "cuda_runtime_version": torch.version.cuda if cuda else None,
            "driver_version": driver_version() if cuda else None,
            "threads": torch.get_num_threads(),
            "host": socket.gethostname(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "git_revision": git_revision(),
            "arguments": sys.argv[1:] if argv is None else list(argv),
        },
        "config": {
            "model": args.model,
            "precision": args.precision,
            "precision_detail": ("fp32 weights and compute, fp32 AdamW" if autocast_dtype is None else
                                 f"fp32 weights, {args.precision} autocast (the Trainer's --{args.precision})"
                                 + (" with a GradScaler" if scaler else "")),
            "micro_batch": args.micro_batch,
            "source_length": args.source_length,
            "target_length": args.target_length,
            "steps": args.steps,
            "warmup_steps": args.warmup_steps,
            "optimizer": args.optimizer,
            "optimizer_detail": optimizer_detail,
            "activation_checkpointing": 1 if args.activation_checkpointing else 0,
            "attention": ran["attention"] + (" (torch.compile)" if args.compile else ""),
            "attention_configured": f"transformers T5Attention ({getattr(config, '_attn_implementation', None) or 'eager'})",
            "attention_operators": ran["operators"],
            "attention_kernels": ran["kernels"],
            "compile": args.compile,
            "dropout_rate": config.dropout_rate,
            "tp_shard": 1,
            "sequence_parallel": False,
            "selective_recomputation": False,
            "offload_optimizer": False,  # the Trainer keeps the optimizer's state on the device
            "seed": args.seed,
            "learning_rate": args.lr,
            "weight_decay": weight_decay,
            "max_grad_norm": 1.0,
            "parameters": parameters,
            "model_config": config_json,
        },
        "notes": [
            "inputs: random token ids of exactly the given lengths, no padding",
            "tokens = source + target tokens per step (as t5scale-train counts them)",
            f"transformers {transformers.__version__}; model FLOPs counted by torch FlopCounterMode",
            f"attention that ran (torch.profiler): {ran['attention']}; the config says "
            f"{getattr(config, '_attn_implementation', None) or 'eager'}",
        ] + ([f"torch.compile: the first step took {first_step_s:.1f} s, {compile_s:.1f} s more than a compiled "
              f"step (compile time, not in the step figures)"] if args.compile else []),
        "steps": steps,
        "median": median,
        "min": minimum,
        "tokens_per_step": tokens,
        "samples_per_step": args.micro_batch,
        "tokens_per_s": tokens / step_s,
        "samples_per_s": args.micro_batch / step_s,
        "compile_s": compile_s,
        "model_flops_per_step": model_flops,
        "model_tflops_per_s": model_flops / step_s / 1e12,
        "peak_flops_per_device": peak,
        "peak_flops_source": "--peak-flops" if peak else "unknown",
        "mfu": model_flops / (step_s * peak) if peak else None,
        "matmul": None,
        "profile": None,  # t5scale-bench --profile only
        # t5scale's planner does not model transformers' memory; the allocator's peak is measured on CUDA only.
        "predicted_peak_bytes": None,
        "measured_peak_bytes": torch.cuda.max_memory_allocated(device) - start_bytes if cuda else None,
        "measured_peak_source": "cuda_allocator_peak_allocated" if cuda else None,
        "memory": {
            "measured": "cuda_allocator_peak_allocated" if cuda else "peak_rss",
            "peak_bytes": (torch.cuda.max_memory_allocated(device) if cuda
                           else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024),
            "start_bytes": start_bytes,
            "reserved_peak_bytes": torch.cuda.max_memory_reserved(device) if cuda else None,
            "predicted_bytes": None,
            "predicted": None,
        },
    }
    skipped = sum(s["skipped"] for s in steps)
    if skipped:
        report["notes"].append(f"{skipped} of {args.steps} timed steps skipped (fp16 overflow)")
    if args.matmul_peak:
        n = 8192 if cuda else 1024
        dtype = autocast_dtype or torch.float32
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        c = a @ b
        seconds = []
        for _ in range(20 if cuda else 5):
            synchronize()
            start = time.perf_counter()
            torch.mm(a, b, out=c)
            synchronize()
            seconds.append(time.perf_counter() - start)
        flops = 2.0 * n**3 / bench_report.median(seconds)
        report["matmul"] = {"n": n, "dtype": args.precision, "tflops_per_s": flops / 1e12,
                            "fraction_of_peak": flops / peak if peak else None}

    print(bench_report.table([report]), flush=True)
    if args.json:
        bench_report.write_json(report, args.json)
    return 0


def main_reporting_out_of_memory(argv=None):
    """main(), with an out-of-memory error of the device turned into a one-line message and EXIT_OUT_OF_MEMORY."""
    try:
        return main(argv)
    except RuntimeError as error:  # torch.OutOfMemoryError is one; others are not ours to turn
        if "out of memory" not in str(error).lower():
            raise
        first_line = str(error).strip().splitlines()[0]
        print(f"hf_reference.py: out of memory: {first_line}", file=sys.stderr)
        return EXIT_OUT_OF_MEMORY


if __name__ == "__main__":
    sys.exit(main_reporting_out_of_memory())
