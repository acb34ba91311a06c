"""Reference data for t5scale's Adafactor, made with transformers.optimization.Adafactor.

A few T5-shaped parameters (two matrices with weight decay, a position-bias table and a norm vector without it,
by t5scale's rule: names containing "norm" or "bias" are not decayed) start from fixed random values; the same
fixed gradients are applied for STEPS steps under several option sets, in float32 and in float64. The file
OUT/adafactor.safetensors holds, per dtype d in {f32, f64}:
  d/init/<param>                    the starting values
  d/grad/<step>/<param>             the gradient of step <step> (1-based)
  d/<case>/<step>/<param>           the parameter after step <step> of case <case>
and in its metadata the format version, the versions of what made it, the case names ("cases", comma-separated),
the number of steps and, per case, "options/<case>": the options as JSON (lr null with relative_step).

usage: make_adafactor_fixtures.py OUT_DIR
"""
import json
import os
import platform
import sys

import safetensors.torch
import torch
import transformers
from transformers.optimization import Adafactor

FORMAT_VERSION = "1"
STEPS = 8

# (name, shape): T5's parameters are matrices and vectors only.
PARAMETERS = [
    ("encoder.blocks.0.self_attn.q.weight", (12, 8)),
    ("decoder.blocks.0.ff.wo.weight", (8, 20)),
    ("encoder.relative_attention_bias.weight", (6, 4)),
    ("encoder.final_norm.weight", (8,)),
]

CASES = {
    # The Hugging Face Trainer's Adafactor: a fixed learning rate, no parameter scale.
    "fixed_lr": dict(lr=1e-2, relative_step=False, scale_parameter=False),
    "fixed_lr_scaled_momentum_decay": dict(lr=3e-3, relative_step=False, scale_parameter=True, beta1=0.9,
                                           weight_decay=0.1),
    # transformers' defaults: T5's relative step with the parameter scale.
    "relative_step": dict(lr=None, relative_step=True, scale_parameter=True),
    "relative_warmup_decay": dict(lr=None, relative_step=True, scale_parameter=True, warmup_init=True,
                                  weight_decay=0.01),
    # Clipping active on every step, another decay rate, momentum, a larger eps2.
    "relative_unscaled_clipped": dict(lr=None, relative_step=True, scale_parameter=False, clip_threshold=0.5,
                                      decay_rate=-0.5, beta1=0.5, eps=(1e-30, 1e-2)),
}


def decays(name):
    return "norm" not in name and "bias" not in name


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    generator = torch.Generator().manual_seed(20240611)
    init = {name: torch.randn(shape, generator=generator, dtype=torch.float64) * 0.5 for name, shape in PARAMETERS}
    init["encoder.final_norm.weight"] += 1.0  # norms start near one
    grads = []
    for step in range(1, STEPS + 1):
        # Scales from 1e-2 to 10, so that the update clipping and the eps terms both matter somewhere.
        scale = 10.0 ** float(torch.empty(1, dtype=torch.float64).uniform_(-2.0, 1.0, generator=generator))
        step_grads = {name: torch.randn(shape, generator=generator, dtype=torch.float64) * scale
                      for name, shape in PARAMETERS}
        if step == 3:
            step_grads["encoder.blocks.0.self_attn.q.weight"][2].zero_()  # a row without gradient: eps1 carries it
        grads.append(step_grads)

    tensors = {}
    for dtype_name, dtype in (("f32", torch.float32), ("f64", torch.float64)):
        for name, value in init.items():
            tensors[f"{dtype_name}/init/{name}"] = value.to(dtype)
        for step, step_grads in enumerate(grads, start=1):
            for name, value in step_grads.items():
                tensors[f"{dtype_name}/grad/{step}/{name}"] = value.to(dtype)
        for case, options in CASES.items():
            params = {name: torch.nn.Parameter(value.to(dtype).clone()) for name, value in init.items()}
            weight_decay = options.get("weight_decay", 0.0)
            rest = {k: v for k, v in options.items() if k != "weight_decay"}
            groups = [
                {"params": [p for n, p in params.items() if decays(n)], "weight_decay": weight_decay},
                {"params": [p for n, p in params.items() if not decays(n)], "weight_decay": 0.0},
            ]
            optimizer = Adafactor(groups, **rest)
            for step, step_grads in enumerate(grads, start=1):
                for name, p in params.items():
                    p.grad = step_grads[name].to(dtype).clone()
                optimizer.step()
                for name, p in params.items():
                    tensors[f"{dtype_name}/{case}/{step}/{name}"] = p.detach().clone()

    metadata = {
        "format_version": FORMAT_VERSION,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "steps": str(STEPS),
        "parameters": ",".join(name for name, _ in PARAMETERS),
        "cases": ",".join(CASES),
    }
    for case, options in CASES.items():
        full = dict(lr=None, eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=-0.8, beta1=None, weight_decay=0.0,
                    scale_parameter=True, relative_step=True, warmup_init=False)  # Adafactor's defaults
        full.update(options)
        metadata[f"options/{case}"] = json.dumps(full)
    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()},
                                os.path.join(out_dir, "adafactor.safetensors"), metadata=metadata)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
