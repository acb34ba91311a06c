#!/usr/bin/env python3
"""A prediction of one bf16 training step's time on an H100, from the kernels and bytes of the step.

No GPU runs here: the step is written out as what its kernels compute and move, per sub-layer, and each part is timed
against the device's peaks at an efficiency range (the low and high figures of each cell). Two versions of the step:

  before  the step as it stood when issue 25 was filed: RMSNorm as nine separate operators with fp32 copies, dropout
          as a bf16 mask and two multiplications, the padded bias materialised per row even without padding, the
          optimizer with a zeroing pass, bf16 weight gradients added into the buckets, a separate unscale/clip pass
          and one write-back kernel per parameter;
  after   the step now: ATen's fused RMSNorm, fused dropout with a byte mask, no mask for an unpadded batch, weight
          gradients computed straight into the fp32 buckets, the clip factor inside fused AdamW, one write-back per
          bucket, no zeroing pass.

What each part counts (per rank, per step, one micro-batch):
  matmul       every projection, the LM head, forward and twice that backward, at 55-72% of the bf16 dense peak
               (what large bf16 GEMMs of these shapes reach with cuBLAS on an H100 SXM);
  attention    SDPA's memory-efficient kernel (it returns the position bias's gradient): QK^T and PV forward, 2.5x
               that backward (it recomputes the probabilities), at 30-45% of the peak;
  elementwise  every other kernel over activations, bytes read and written, at 80-90% of HBM bandwidth, and no
               kernel shorter than one launch (3-5 us): small decoder kernels are launch-bound;
  optimizer    the gradient buckets and AdamW, bytes per parameter, at 80-90% of HBM bandwidth.
Communication is left out (one rank; --tp-shard in t5scale-bench measures the same). MFU is the planner's model
FLOPs (matmuls and attention, forward and backward) over the step time and the peak.

Usage: python bench/gpu_step_model.py [--check FILE]   (--check: exit 1 unless FILE holds this table verbatim)
"""
import argparse
import dataclasses

PEAK_BF16_FLOPS = 989.4e12  # H100 SXM, dense bf16
HBM_BYTES_PER_S = 3.35e12   # H100 SXM, HBM3
MATMUL_EFFICIENCY = (0.55, 0.72)
ATTENTION_EFFICIENCY = (0.30, 0.45)
BANDWIDTH_EFFICIENCY = (0.80, 0.90)
LAUNCH_S = (3e-6, 5e-6)


@dataclasses.dataclass
class Row:
    name: str
    d_model: int
    d_ff: int
    heads: int
    d_kv: int
    layers: int
    gated: bool
    vocab: int
    tp: int
    micro_batch: int
    source: int = 512
    target: int = 128

    @property
    def inner(self):  # attention width on this rank
        return self.heads * self.d_kv // self.tp

    @property
    def heads_here(self):
        return self.heads // self.tp

    @property
    def ff(self):
        return self.d_ff // self.tp


ROWS = [
    Row("T5-3B, whole model, 512/128, micro-batch 4", 1024, 16384, 32, 128, 24, False, 32128, 1, 4),
    Row("T5-v1.1-XXL, one TP=8 shard, 512/128, micro-batch 32", 4096, 10240, 64, 64, 24, True, 32128, 8, 32),
]


def parameters_here(r):
    ff_matrices = 3 if r.gated else 2
    encoder = r.layers * (4 * r.d_model * r.inner + ff_matrices * r.d_model * r.ff + 2 * r.d_model)
    decoder = r.layers * (8 * r.d_model * r.inner + ff_matrices * r.d_model * r.ff + 3 * r.d_model)
    embeddings = r.vocab // r.tp * r.d_model * (1 if not r.gated else 2)  # v1.1 unties the LM head
    return encoder + decoder + embeddings + 2 * r.d_model


def matmul_flops(r):
    ns, nt = r.micro_batch * r.source, r.micro_batch * r.target
    ff_matrices = 3 if r.gated else 2
    encoder = r.layers * 2 * ns * (4 * r.d_model * r.inner + ff_matrices * r.d_model * r.ff)
    decoder = r.layers * 2 * (nt * (6 * r.d_model * r.inner + ff_matrices * r.d_model * r.ff) +
                              ns * 2 * r.d_model * r.inner)  # cross-attention keys and values over the encoder
    lm_head = 2 * nt * r.d_model * (r.vocab // r.tp)
    return 3 * (encoder + decoder + lm_head)


def attention_flops(r):
    per_pair = 4 * r.micro_batch * r.heads_here * r.d_kv  # QK^T and PV, 2 flops a multiply-add
    forward = r.layers * per_pair * (r.source * r.source + r.target * r.target + r.target * r.source)
    return forward, 3.5 * forward  # model FLOPs (forward + 2x backward), executed (backward recomputes: 2.5x)


# Elementwise kernels of one sub-layer and around it: (what, elements per token, bytes per element, kernels). Bytes
# are reads plus writes of bf16 (2), fp32 (4) and byte masks (1); the norm's per-row statistics are left out.
NORM = {
    "before": [  # to(fp32), pow, mean, add+rsqrt, mul, to(bf16), weight mul; backward about twice the traffic
        ("rmsnorm forward", "d_model", 2 + 4 + 4 + 4 + 4 + 2 + 4 + 4 + 2 + 2 + 2, 7),
        ("rmsnorm backward", "d_model", 52, 12),
    ],
    "after": [  # ATen's fused kernels: x in, y out; backward x and dy in, dx out, weight gradient reduced
        ("rmsnorm forward", "d_model", 4, 1),
        ("rmsnorm backward", "d_model", 8, 2),
    ],
}
DROPOUT = {
    "before": [("dropout forward", 1, 2 + 2 + 2 + 2 + 2 + 2, 3), ("dropout backward", 1, 2 + 2 + 2, 1)],
    "after": [("dropout forward", 1, 2 + 2 + 1, 1), ("dropout backward", 1, 2 + 1 + 2, 1)],
}
RESIDUAL = [("residual add", "d_model", 6, 1), ("residual gradient sum", "d_model", 6, 1)]
CONTEXT = [("heads to rows (contiguous), both ways", "inner", 8, 2)]
FEED_FORWARD = {
    True: [("gelu(wi_0) * wi_1, forward", "ff", 2 + 2 + 2 + 2 + 2 + 2, 2),
           ("gelu(wi_0) * wi_1, backward", "ff", 6 + 12, 3)],
    False: [("relu, forward", "ff", 4, 1), ("relu, backward", "ff", 6, 1)],
}


def sub_layer_kernels(r, version, inner_kernels):
    kernels = NORM[version] + RESIDUAL + [(w, "d_model", b, k) for w, _, b, k in DROPOUT[version]] + inner_kernels
    return kernels


def elementwise_seconds(r, version, efficiency, launch_s):
    width = {"d_model": r.d_model, "inner": r.inner, "ff": r.ff}
    ff_kernels = FEED_FORWARD[r.gated] + [(w, "ff", b, k) for w, _, b, k in DROPOUT[version]]
    attention_sub_layer = sub_layer_kernels(r, version, CONTEXT)
    ff_sub_layer = sub_layer_kernels(r, version, ff_kernels)
    total = 0.0
    for tokens, sub_layers in ((r.micro_batch * r.source, [attention_sub_layer, ff_sub_layer]),
                               (r.micro_batch * r.target, [attention_sub_layer, attention_sub_layer, ff_sub_layer])):
        for kernels in sub_layers:
            for _, basis, bytes_per_element, count in kernels:
                elements = tokens * width[basis]
                moved_s = elements * bytes_per_element / (HBM_BYTES_PER_S * efficiency)
                total += r.layers * max(moved_s, count * launch_s)
    # The position bias: before, the padded (B, H, S, S) bias was made per row for every batch, and its gradient
    # summed over the blocks and the rows; after, an unpadded batch keeps (1, H, S, S) and sums in fp32.
    rows = r.micro_batch if version == "before" else 1
    bias_elements = rows * r.heads_here * (r.source ** 2) + r.heads_here * r.target ** 2
    bias_bytes = bias_elements * (2 + 2 + 2 * r.layers * (2 if version == "before" else 4))
    total += bias_bytes / (HBM_BYTES_PER_S * efficiency)
    return total


# Gradient buckets and AdamW, bytes per parameter: the weight gradient into its fp32 bucket (before: the bucket
# zeroed, the gradient written in bf16, read and added; after: the GEMM writes it in fp32 straight into the bucket),
# the norm's read, the unscale/clip pass (before: a separate read and write; after: inside fused AdamW, which writes
# the clipped gradient back), AdamW (parameter, two moments read and written, the gradient read), the bf16 write-back.
OPTIMIZER_BYTES_PER_PARAMETER = {
    "before": 4 + (2 + 2 + 4 + 4) + 4 + 8 + 28 + 6,
    "after": 4 + 4 + (28 + 4) + 6,
}
OPTIMIZER_KERNELS = {"before": lambda parameters: 3 * parameters, "after": lambda parameters: 12}


def predict(r, version):
    params = parameters_here(r)
    flops = matmul_flops(r)
    model_attention, executed_attention = attention_flops(r)
    cells = {}
    for label, pick in (("low", 1), ("high", 0)):  # low time: the high efficiency
        mm = flops / (PEAK_BF16_FLOPS * MATMUL_EFFICIENCY[pick])
        att = executed_attention / (PEAK_BF16_FLOPS * ATTENTION_EFFICIENCY[pick])
        ew = elementwise_seconds(r, version, BANDWIDTH_EFFICIENCY[pick], LAUNCH_S[1 - pick])
        opt = params * OPTIMIZER_BYTES_PER_PARAMETER[version] / (HBM_BYTES_PER_S * BANDWIDTH_EFFICIENCY[pick])
        total = mm + att + ew + opt
        cells[label] = {"matmul": mm, "attention": att, "elementwise": ew, "optimizer": opt, "step": total,
                        "mfu": (flops + model_attention) / total / PEAK_BF16_FLOPS}
    return cells


def table():
    parts = ["matmul", "attention", "elementwise", "optimizer", "step"]
    lines = ["| row | version | " + " | ".join(f"{p} ms" for p in parts) + " | MFU |",
             "| --- | --- | " + " | ".join("---" for _ in parts) + " | --- |"]
    for r in ROWS:
        for version in ("before", "after"):
            cells = predict(r, version)
            text = [f"{cells['low'][p] * 1e3:.0f}-{cells['high'][p] * 1e3:.0f}" for p in parts]
            mfu = f"{cells['high']['mfu'] * 100:.0f}-{cells['low']['mfu'] * 100:.0f}%"
            lines.append(f"| {r.name} | {version} | " + " | ".join(text) + f" | {mfu} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", metavar="FILE", help="exit 1 unless FILE holds the table as printed")
    args = parser.parse_args()
    text = table()
    if args.check:
        with open(args.check, encoding="utf-8") as f:
            if text not in f.read():
                print(f"{args.check} does not hold the table this model prints now:\n{text}")
                raise SystemExit(1)
        print(f"{args.check} holds the current table")
        return
    print(text)


if __name__ == "__main__":
    main()
