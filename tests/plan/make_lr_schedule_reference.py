"""Reference learning rates for t5scale's LR plan, made with Hugging Face transformers' own schedulers.

Each case is a run config (as --set overrides on the defaults), a world size and the sampler's steps per epoch;
the script computes the peak LR, the warmup and the total steps the way the case's comment says, builds the
transformers scheduler for them (get_constant_schedule_with_warmup, get_linear_schedule_with_warmup,
get_cosine_schedule_with_warmup, get_cosine_with_min_lr_schedule_with_warmup, get_inverse_sqrt_schedule) on a
torch optimizer, and records the LR of every update from the first (scheduler count 0) to the total step count.
Warmup from warmup_ratio comes from TrainingArguments.get_warmup_steps; total steps from epochs as the Trainer
computes them (ceil(epochs x steps per epoch)).

usage: make_lr_schedule_reference.py OUT.json
"""
import json
import math
import os
import platform
import sys
import types
import warnings

import torch
import transformers
from transformers import TrainingArguments
from transformers.optimization import (
    get_constant_schedule_with_warmup,
    get_cosine_schedule_with_warmup,
    get_cosine_with_min_lr_schedule_with_warmup,
    get_inverse_sqrt_schedule,
    get_linear_schedule_with_warmup,
)

FORMAT_VERSION = 1

# name: (overrides, world_size, steps_per_epoch). Batch and scaling are kept to what the comment says.
CASES = {
    "linear_warmup": (["train.max_steps=100", "lr_schedule.warmup_steps=10", "lr_schedule.decay=linear",
                       "optimizer.lr=3e-4"], 1, 0),
    "linear_no_warmup": (["train.max_steps=50", "lr_schedule.decay=linear", "optimizer.lr=1e-3"], 1, 0),
    "cosine_warmup": (["train.max_steps=100", "lr_schedule.warmup_steps=10", "lr_schedule.decay=cosine",
                       "optimizer.lr=3e-4"], 1, 0),
    "cosine_odd_lengths": (["train.max_steps=61", "lr_schedule.warmup_steps=7", "lr_schedule.decay=cosine",
                            "optimizer.lr=0.01"], 1, 0),
    "cosine_min_lr": (["train.max_steps=61", "lr_schedule.warmup_steps=7", "lr_schedule.decay=cosine",
                       "lr_schedule.min_lr_ratio=0.1", "optimizer.lr=2e-4"], 1, 0),
    "constant_warmup": (["train.max_steps=40", "lr_schedule.warmup_steps=5", "optimizer.lr=5e-5"], 1, 0),
    "constant_no_warmup": (["train.max_steps=20", "optimizer.lr=5e-5"], 1, 0),
    "inverse_sqrt_warmup": (["train.max_steps=200", "lr_schedule.warmup_steps=10", "lr_schedule.decay=inverse_sqrt",
                             "optimizer.lr=0.01"], 1, 0),
    "inverse_sqrt_no_warmup": (["train.max_steps=50", "lr_schedule.decay=inverse_sqrt", "optimizer.lr=0.01"], 1, 0),
    # warmup_ratio -> TrainingArguments.get_warmup_steps(total)
    "linear_warmup_ratio": (["train.max_steps=120", "lr_schedule.warmup_ratio=0.1", "lr_schedule.decay=linear",
                             "optimizer.lr=1e-4"], 1, 0),
    # epochs -> ceil(epochs x steps per epoch), as the Trainer's max_steps
    "cosine_epochs": (["train.epochs=2.5", "lr_schedule.warmup_steps=4", "lr_schedule.decay=cosine",
                       "optimizer.lr=1e-4"], 1, 12),
    # sqrt rule, k = 64 / 16 = 4: peak = lr x 2; scale_warmup: 40 x 16 / 64 = 10 steps; 4 ranks x 2 micro-batches
    "sqrt_scaled_warmup": (["train.max_steps=80", "train.global_batch=64", "train.grad_accumulation=2",
                            "lr_scaling.rule=sqrt", "lr_scaling.reference_global_batch=16",
                            "lr_scaling.scale_warmup=true", "lr_schedule.warmup_steps=40",
                            "lr_schedule.decay=cosine", "optimizer.lr=1e-4"], 4, 0),
    # linear rule, k = 48 / 16 = 3: peak = lr x 3; scale_warmup: ceil(25 x 16 / 48) = 9 steps
    "linear_scaled_warmup": (["train.max_steps=90", "train.global_batch=48", "lr_scaling.rule=linear",
                              "lr_scaling.reference_global_batch=16", "lr_scaling.scale_warmup=true",
                              "lr_schedule.warmup_steps=25", "lr_schedule.decay=linear", "optimizer.lr=1e-4"], 3, 0),
}


def setting(overrides, key, default):
    for item in overrides:
        k, v = item.split("=", 1)
        if k == key:
            return type(default)(v) if not isinstance(default, bool) else v == "true"
    return default


def plan(overrides, steps_per_epoch):
    lr = setting(overrides, "optimizer.lr", 3e-4)
    rule = setting(overrides, "lr_scaling.rule", "none")
    reference = setting(overrides, "lr_scaling.reference_global_batch", 16)
    global_batch = setting(overrides, "train.global_batch", 16)
    k = global_batch / reference
    peak = {"none": lr, "linear": lr * k, "sqrt": lr * math.sqrt(k)}[rule]
    max_steps = setting(overrides, "train.max_steps", 0)
    epochs = setting(overrides, "train.epochs", 0.0)
    total = max_steps if max_steps > 0 else math.ceil(epochs * steps_per_epoch)
    # TrainingArguments' own method on just the two fields it reads (building a TrainingArguments needs accelerate).
    fields = types.SimpleNamespace(warmup_steps=setting(overrides, "lr_schedule.warmup_steps", 0),
                                   warmup_ratio=setting(overrides, "lr_schedule.warmup_ratio", 0.0))
    warmup = TrainingArguments.get_warmup_steps(fields, total)
    if setting(overrides, "lr_scaling.scale_warmup", False):
        warmup = math.ceil(warmup * reference / global_batch)  # the same warmup samples as at the reference batch
    return peak, warmup, total


def schedule_lrs(decay, peak, warmup, total, min_lr_ratio):
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=peak)
    if decay == "constant":
        scheduler = get_constant_schedule_with_warmup(optimizer, warmup)
    elif decay == "linear":
        assert min_lr_ratio == 0.0, "transformers' linear schedule ends at 0"
        scheduler = get_linear_schedule_with_warmup(optimizer, warmup, total)
    elif decay == "cosine" and min_lr_ratio == 0.0:
        scheduler = get_cosine_schedule_with_warmup(optimizer, warmup, total)
    elif decay == "cosine":
        scheduler = get_cosine_with_min_lr_schedule_with_warmup(optimizer, warmup, total, min_lr_rate=min_lr_ratio)
    elif decay == "inverse_sqrt":
        scheduler = get_inverse_sqrt_schedule(optimizer, warmup)
    else:
        raise ValueError(decay)
    lrs = []
    for _ in range(total + 1):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return lrs


def main():
    out_path = sys.argv[1]
    warnings.simplefilter("ignore")
    cases = []
    for name, (overrides, world_size, steps_per_epoch) in CASES.items():
        peak, warmup, total = plan(overrides, steps_per_epoch)
        decay = setting(overrides, "lr_schedule.decay", "constant")
        min_lr_ratio = setting(overrides, "lr_schedule.min_lr_ratio", 0.0)
        cases.append({"name": name, "set": overrides, "world_size": world_size, "steps_per_epoch": steps_per_epoch,
                      "effective_lr": peak, "warmup_steps": warmup, "total_steps": total,
                      "lr": schedule_lrs(decay, peak, warmup, total, min_lr_ratio)})
    document = {"format_version": FORMAT_VERSION, "transformers": transformers.__version__,
                "torch": torch.__version__, "python": platform.python_version(), "cases": cases}
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path + ".tmp", "w") as f:
        json.dump(document, f, indent=1)
    os.replace(out_path + ".tmp", out_path)
    print(f"{len(cases)} cases from transformers {transformers.__version__} -> {out_path}")


if __name__ == "__main__":
    main()
