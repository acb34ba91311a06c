#!/usr/bin/env python3
"""Forward + backward of one T5 self-attention with its learned position bias, by kernel, on a CUDA device.

T5's attention adds a bias (relative positions plus padding) that needs a gradient, which rules out flash attention;
this times what can take it, on the shapes of the benchmark rows:
  efficient  SDPA's memory-efficient kernel, the bias as its float mask (t5scale's CUDA default)
  cudnn      SDPA's cuDNN kernel, the same mask (reported as refused where it cannot take a mask that needs a gradient)
  math       SDPA's math path
  explicit   t5scale's explicit path: q k^T + bias, an fp32 softmax, dropout, the product with v
Each: median of --repeats fwd+bwd by CUDA events after --warmup, dropout 0.1, bf16; then, without dropout, each
kernel's output and bias gradient against the explicit path in fp32 as ||x - ref|| / ||ref||.

    python bench/attention_kernels.py                      # the T5-3B 147/26, XXL tp8 512/128 and base 512/128 rows
    python bench/attention_kernels.py --shapes 64x32x147x128 --json out.json
    python bench/attention_kernels.py --bias model         # the bias as the model holds it: (1, H, S, S)
--bias per-row (the default) gives every row its own bias, as the encoder's position bias plus that row's padding
mask; --bias model gives one (1, H, S, S) bias broadcast over the batch, the relative-position bias itself with no
padding folded in, whose gradient is summed over the batch (the shape a fused kernel takes with padding by lengths).
"""

import argparse
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

KERNELS = ["efficient", "cudnn", "math", "explicit"]
BACKENDS = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}


def attend(kernel, q, k, v, bias, p):
    if kernel == "explicit":
        scores = torch.matmul(q, k.transpose(-1, -2)) + bias
        weights = torch.softmax(scores.float(), -1).to(q.dtype)
        return torch.matmul(F.dropout(weights, p), v)
    with sdpa_kernel([BACKENDS[kernel]]):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p, scale=1.0)


BIAS_ROWS = {"per-row": None, "model": 1}  # the bias's batch dimension: the batch's, or 1


def inputs(b, h, s, d, dtype, seed, bias_rows=None):
    g = torch.Generator(device="cuda").manual_seed(seed)
    make = lambda *shape: torch.randn(*shape, device="cuda", dtype=dtype, generator=g)  # noqa: E731
    q, k, v = (make(b, h, s, d).requires_grad_() for _ in range(3))
    # Per-row: as the encoder carries it (position bias plus each row's padding mask), (B, H, S, S); model: the
    # relative-position bias alone, (1, H, S, S), broadcast over the batch.
    bias = make(bias_rows or b, h, s, s).requires_grad_()
    return q, k, v, bias


def time_kernel(kernel, shape, dtype, warmup, repeats, bias_rows=None):
    b, h, s, d = shape
    q, k, v, bias = inputs(b, h, s, d, dtype, seed=1, bias_rows=bias_rows)
    grad = torch.randn(b, h, s, d, device="cuda", dtype=dtype)
    times = []
    for i in range(warmup + repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = attend(kernel, q, k, v, bias, 0.1)
        out.backward(grad)
        end.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
        q.grad = k.grad = v.grad = bias.grad = None
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = attend(kernel, q, k, v, bias, 0.1)
    saved = torch.cuda.max_memory_allocated() - base
    out.backward(grad)
    return sorted(times)[len(times) // 2], saved


def accuracy(kernel, shape, dtype, bias_rows=None):
    b, h, s, d = shape
    b = min(b, 4)
    q, k, v, bias = inputs(b, h, s, d, dtype, seed=2, bias_rows=bias_rows)
    grad = torch.randn(b, h, s, d, device="cuda", dtype=dtype)
    ref = [t.detach().double().requires_grad_() for t in (q, k, v, bias)]
    out_ref = attend("explicit", *ref, 0.0)
    out_ref.backward(grad.double())
    out = attend(kernel, q, k, v, bias, 0.0)
    out.backward(grad)
    rel = lambda x, r: ((x.double() - r).norm() / r.norm()).item()  # noqa: E731
    return rel(out, out_ref), rel(bias.grad, ref[3].grad)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="64x32x147x128,64x8x512x64,256x12x512x64",
                   help="comma-separated BxHxSxD (batch, heads of the rank, tokens, head size)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--bias", choices=sorted(BIAS_ROWS), default="per-row",
                   help="per-row: (B, H, S, S), each row its own; model: (1, H, S, S), broadcast over the batch")
    p.add_argument("--json", help="write the table here")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("attention_kernels.py: no CUDA device", file=sys.stderr)
        return 77
    dtype = torch.bfloat16
    rows = []
    bias_rows = BIAS_ROWS[a.bias]
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"bias {a.bias}")
    print(f"{'shape BxHxSxD':>18} {'kernel':>10} {'fwd+bwd ms':>11} {'fwd peak GiB':>12} {'out err':>9} "
          f"{'dbias err':>9}")
    for text in a.shapes.split(","):
        shape = tuple(int(x) for x in text.split("x"))
        for kernel in KERNELS:
            row = {"shape": text, "kernel": kernel, "bias": a.bias}
            try:
                row["ms"], saved = time_kernel(kernel, shape, dtype, a.warmup, a.repeats, bias_rows)
                row["saved_gib"] = saved / 2**30
                row["out_rel_err"], row["dbias_rel_err"] = accuracy(kernel, shape, dtype, bias_rows)
                print(f"{text:>18} {kernel:>10} {row['ms']:11.3f} {row['saved_gib']:12.3f} "
                      f"{row['out_rel_err']:9.2e} {row['dbias_rel_err']:9.2e}")
            except Exception as e:  # a kernel that refuses the inputs is a result, not a failure
                row["error"] = str(e).splitlines()[0][:200]
                print(f"{text:>18} {kernel:>10} refused: {row['error']}")
            torch.cuda.empty_cache()
            rows.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "bias": a.bias, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
