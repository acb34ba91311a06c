#!/usr/bin/env python3
"""Pure-bf16 Adafactor against Adafactor with fp32 master weights, on real text (issue 57).

What it measures: the quality of fine-tuning a small pretrained T5 on the manual-page summary task (a page's
DESCRIPTION -> its NAME line, data_prep/recipes/manpages_summary.yaml) under three ways of keeping the weights:

  A  fp32-master  bf16 weights and compute, fp32 master weights; transformers' Adafactor updates the fp32 masters
                  and the bf16 compute copy is rounded (to nearest) from them after every step: what t5scale runs
                  today with precision bf16.
  B  bf16-sr      the bf16 weights are the only copy: Adafactor's update is computed in fp32 from the bf16 weight
                  and fp32 factored second moments, and the new value is written back to bf16 with stochastic
                  rounding (uniform random bits added below bf16's mantissa of the fp32 bit pattern, then cut).
  C  bf16-rne     as B, but written back rounded to nearest (what transformers' Adafactor does to bf16 weights).

The use it stands for is fine-tuning (a released checkpoint, small updates on weights of their own size), so the
model is first pretrained once, in fp32, on T5's span corruption over the training pages' descriptions (15% of the
tokens in spans of mean length 3, each replaced by a sentinel; fresh spans every step), and every arm fine-tunes
from those weights (rounded to bf16 to nearest where an arm keeps bf16 alone). All arms run the same bf16 model
code, the same fp32 gradient path (bf16 gradients cast to fp32, global norm clipped to 1.0), and the same batches
and dropout streams for a given seed; only the place where the update lands differs. The update loop of B and C
mirrors transformers.optimization.Adafactor line for line; before the runs it is checked to equal transformers'
Adafactor bit for bit on fp32 weights, and the stochastic rounding is checked (its mean equals the value; an update
below half a bf16 ulp survives on average and is lost by rounding to nearest).

Settings: t5scale's Adafactor defaults (fixed step size, no scale_parameter, no relative step, no first moment,
decay_rate -0.8, clip_threshold 1.0, eps 1e-30 / 1e-3), fine-tuning LR 1e-3 (the LR usually given for fine-tuning
T5 with Adafactor) with 6% linear warmup then linear decay, no weight decay, dropout 0.1; the model of
jobs/strategies-manpages.yaml (gated-GELU, untied embeddings, 16 position buckets; d_model 128, d_kv 32, 4 heads,
d_ff 512, 3 + 3 layers, 2.8M parameters) with its LM head initialised at std d_model^-0.5 (transformers' T5 draws
it at std 1, a first loss of about 40 nats), source length 128, target length 24 (cut as t5scale cuts: eos kept
last), batch 16. Pretraining: the same shape without dropout, Adafactor on fp32 weights, LR 3e-3 (6% warmup, linear
decay), 128-token pieces of the training split's sources. Reported: validation loss (token cross-entropy over the
47 validation pages) every --eval-every steps, its best and its last, the test loss, and ROUGE-L (rouge-score,
stemmer on, as t5scale's eval) of greedy decoding (24 new tokens) on the 96 held-out pages (validation + test), per
arm and seed, with the CPU time of each run.

Make the data (outside the repository) and run, e.g.:
    python data_prep/manpages/make_corpus.py --out /tmp/bf16exp
    build/bin/t5scale-prep --recipe data_prep/recipes/manpages_summary.yaml --input /tmp/bf16exp/corpus.jsonl \\
        --out /tmp/bf16exp/summary.h5 --train-tokenizer --tokenizer-out /tmp/bf16exp/spiece.model --vocab-size 4000
    nice -n 19 python bench/bf16_adafactor_quality.py --data /tmp/bf16exp --pretrain-steps 1000 --steps 400 \\
        --seeds 1234,1235 --jobs 2 --out results/bf16-adafactor/results.json
Each fine-tuning run uses one thread (torch.set_num_threads(1)); --jobs runs that many side by side.
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import platform
import sys
import time

import h5py
import numpy as np
import torch
import torch.nn.functional as F

ARMS = ("fp32-master", "bf16-sr", "bf16-rne")
ADAFACTOR = dict(eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=-0.8, beta1=None, weight_decay=0.0,
                 scale_parameter=False, relative_step=False, warmup_init=False)


# ---------------------------------------------------------------------------------------------- rounding to bf16
def stochastic_round_bf16(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """fp32 -> bf16 with stochastic rounding: a uniform integer in [0, 2^16) is added to the fp32 bit pattern and
    the low 16 bits are cut, so x rounds away from zero with probability (distance to the lower neighbour) / ulp.
    Works on the sign-magnitude pattern, so negative values round symmetrically. Finite inputs only."""
    assert x.dtype == torch.float32
    bits = x.contiguous().view(torch.int32)
    noise = torch.randint(0, 1 << 16, x.shape, dtype=torch.int32, generator=generator)
    cut = (bits + noise) & -65536  # 0xFFFF0000
    return cut.view(torch.float32).to(torch.bfloat16)  # exact: the low 16 bits are zero


def check_stochastic_rounding():
    """E[SR(x)] = x, only the two bf16 neighbours come out, and a small update survives on average."""
    g = torch.Generator().manual_seed(0)
    out = {}
    n = 400_000
    for x0 in (1.0 + 1e-3, -0.0312 - 3.3e-5, 7.3e-4):
        x = torch.full((n,), x0, dtype=torch.float32)
        r = stochastic_round_bf16(x, g).float()
        lo = x.to(torch.bfloat16).float()[0].item()
        vals = sorted(set(r.unique().tolist()))
        assert len(vals) <= 2, vals
        ulp = abs(vals[-1] - vals[0]) if len(vals) == 2 else 0.0
        mean = r.double().mean().item()
        stderr = ulp / 2 / math.sqrt(n)
        assert abs(mean - x0) < 5 * stderr + 1e-12, (x0, mean, stderr)
        out[f"mean_of_sr({x0!r})"] = {"mean": mean, "nearest": lo, "abs_err_mean": abs(mean - x0),
                                      "abs_err_nearest": abs(lo - x0), "stderr": stderr}
    # 1000 updates of -1e-4 on weights of 1.0 (half a bf16 ulp at 1.0 is 2^-8 = 3.9e-3 above, 2^-9 below).
    w_sr = torch.ones(20_000, dtype=torch.bfloat16)
    w_rn = torch.ones(20_000, dtype=torch.bfloat16)
    for _ in range(1000):
        w_sr = stochastic_round_bf16(w_sr.float() - 1e-4, g)
        w_rn = (w_rn.float() - 1e-4).to(torch.bfloat16)
    sr_mean, rn_mean = w_sr.double().mean().item(), w_rn.double().mean().item()
    assert rn_mean == 1.0, rn_mean
    assert abs(sr_mean - 0.9) < 2e-3, sr_mean
    out["1000_updates_of_-1e-4_from_1.0"] = {"expected": 0.9, "stochastic": sr_mean, "nearest": rn_mean}
    return out


# ------------------------------------------------------------------------------------------------------ Adafactor
class Adafactor16:
    """transformers.optimization.Adafactor's update, step for step, on parameters that may be bf16: the state is
    fp32, the update is computed in fp32 from the parameter's value, and the result is written back by
    `writeback` ("sr": stochastic rounding, "rne": round to nearest; fp32 parameters are written exactly).
    Gradients are passed in (fp32)."""

    def __init__(self, params, writeback, generator=None, **kw):
        self.params = list(params)
        self.o = dict(ADAFACTOR, **kw)
        self.writeback = writeback
        self.generator = generator
        self.state = [dict(step=0) for _ in self.params]
        self.stalled = [0, 0]  # elements with a nonzero update whose stored value did not change / all of them

    @staticmethod
    def _rms(t):
        return t.norm(2) / (t.numel() ** 0.5)

    @staticmethod
    def _approx_sq_grad(row, col):
        r_factor = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
        c_factor = col.unsqueeze(-2).rsqrt()
        return torch.mul(r_factor, c_factor)

    def _get_lr(self, lr, state):
        rel = lr
        if self.o["relative_step"]:
            min_step = 1e-6 * state["step"] if self.o["warmup_init"] else 1e-2
            rel = min(min_step, 1.0 / math.sqrt(state["step"]))
        scale = max(self.o["eps"][1], state["RMS"]) if self.o["scale_parameter"] else 1.0
        return scale * rel

    @torch.no_grad()
    def step(self, grads, lr, count_stalled=False):
        o = self.o
        for p, grad, state in zip(self.params, grads, self.state):
            grad = grad.float()
            factored = grad.dim() >= 2
            if state["step"] == 0:
                if o["beta1"] is not None:
                    state["exp_avg"] = torch.zeros_like(grad)
                if factored:
                    state["exp_avg_sq_row"] = torch.zeros(grad.shape[:-1]).to(grad)
                    state["exp_avg_sq_col"] = torch.zeros(grad.shape[:-2] + grad.shape[-1:]).to(grad)
                else:
                    state["exp_avg_sq"] = torch.zeros_like(grad)
            # fp32 working copy of the weight ("exact": an fp32 weight updated in place, as transformers does)
            p32 = p.data if self.writeback == "exact" else p.data.float().clone()
            state["step"] += 1
            state["RMS"] = self._rms(p32)
            step_lr = self._get_lr(lr, state)
            beta2t = 1.0 - math.pow(state["step"], o["decay_rate"])
            update = (grad**2) + o["eps"][0]
            if factored:
                row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
                row.mul_(beta2t).add_(update.mean(dim=-1), alpha=(1.0 - beta2t))
                col.mul_(beta2t).add_(update.mean(dim=-2), alpha=(1.0 - beta2t))
                update = self._approx_sq_grad(row, col)
                update.mul_(grad)
            else:
                v = state["exp_avg_sq"]
                v.mul_(beta2t).add_(update, alpha=(1.0 - beta2t))
                update = v.rsqrt().mul_(grad)
            update.div_((self._rms(update) / o["clip_threshold"]).clamp_(min=1.0))
            update.mul_(step_lr)
            if o["beta1"] is not None:
                state["exp_avg"].mul_(o["beta1"]).add_(update, alpha=(1 - o["beta1"]))
                update = state["exp_avg"]
            if o["weight_decay"] != 0:
                p32.add_(p32, alpha=(-o["weight_decay"] * step_lr))
            p32.add_(-update)
            if self.writeback == "exact":
                continue  # updated in place
            # the weight is stored in bf16 (a bf16 tensor, or with emulated compute an fp32 tensor of bf16 values)
            new = stochastic_round_bf16(p32, self.generator) if self.writeback == "sr" else p32.to(torch.bfloat16)
            if count_stalled:
                moved = update != 0
                self.stalled[0] += int(((new == p.data) & moved).sum())
                self.stalled[1] += int(moved.sum())
            p.data.copy_(new)


def check_adafactor_equals_transformers(model_fn, steps=6):
    """Adafactor16 on fp32 weights against transformers' Adafactor: the same gradients, several steps, varying LR."""
    from transformers.optimization import Adafactor

    torch.manual_seed(7)
    m1 = model_fn()
    m2 = model_fn()
    m2.load_state_dict(m1.state_dict())
    start = [p.detach().clone() for p in m1.parameters()]
    p1 = [p for p in m1.parameters()]
    p2 = [p for p in m2.parameters()]
    ref = Adafactor(p1, lr=1e-3, **ADAFACTOR)
    mine = Adafactor16(p2, writeback="exact")
    g = torch.Generator().manual_seed(11)
    for s in range(steps):
        lr = 1e-3 * (s + 1) / steps
        grads = [torch.randn(p.shape, generator=g) * (10.0 ** (s % 3 - 2)) for p in p1]
        for p, gr in zip(p1, grads):
            p.grad = gr.clone()
        for grp in ref.param_groups:
            grp["lr"] = lr
        ref.step()
        mine.step([gr.clone() for gr in grads], lr)
    worst = max((a - b).abs().max().item() for a, b in zip(p1, p2))
    moved = max((a.detach() - b).abs().max().item() for a, b in zip(p1, start))
    assert worst == 0.0, f"Adafactor16 differs from transformers' Adafactor by {worst}"
    return {"steps": steps, "max_abs_diff": worst, "max_abs_change_of_weights": moved}


# ------------------------------------------------------------------------------------------------------------ data
def load_split(path, split, max_src, max_tgt):
    with h5py.File(path, "r") as f:
        g = f[split]
        out = []
        for kind, limit in (("source", max_src), ("target", max_tgt)):
            off = g[f"{kind}_offsets"][:]
            tok = g[f"{kind}_tokens"][:]
            seqs = []
            for i in range(len(off) - 1):
                s = tok[off[i]:off[i + 1]].astype(np.int64)
                assert s[-1] == 1, "every sequence ends with eos"
                if len(s) > limit:  # as t5scale's TruncatedExamples: cut, eos kept last
                    s = np.concatenate([s[:limit - 1], s[-1:]])
                seqs.append(s)
            out.append(seqs)
        vocab = int(f.attrs["vocab_size"])
    return list(zip(*out)), vocab


def collate(examples):
    ls = max(len(s) for s, _ in examples)
    lt = max(len(t) for _, t in examples)
    src = torch.zeros(len(examples), ls, dtype=torch.long)
    mask = torch.zeros(len(examples), ls, dtype=torch.long)
    lab = torch.full((len(examples), lt), -100, dtype=torch.long)
    for i, (s, t) in enumerate(examples):
        src[i, :len(s)] = torch.from_numpy(s)
        mask[i, :len(s)] = 1
        lab[i, :len(t)] = torch.from_numpy(t)
    return src, mask, lab


def batch_order(n, batch, steps, seed):
    """The same batches for every arm of a seed: epochs of a seeded permutation, concatenated, cut into batches."""
    g = torch.Generator().manual_seed(seed)
    idx = []
    while len(idx) < steps * batch:
        idx.extend(torch.randperm(n, generator=g).tolist())
    return [idx[i * batch:(i + 1) * batch] for i in range(steps)]


# ----------------------------------------------------------------------------------------------------------- model
def make_config(vocab, dropout=0.0):
    from transformers import T5Config

    return T5Config(vocab_size=vocab, d_model=128, d_kv=32, d_ff=512, num_heads=4, num_layers=3,
                    num_decoder_layers=3, relative_attention_num_buckets=16, relative_attention_max_distance=32,
                    dropout_rate=dropout, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                    pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, initializer_factor=1.0)


def new_model(vocab, seed, dropout=0.0):
    """transformers' T5 at its own initialisation, but the untied LM head at std d_model^-0.5 (transformers draws it
    at std 1: logits of std about sqrt(d_model) and a first loss near 40 nats, where log(vocab) is 8.3)."""
    from transformers import T5ForConditionalGeneration

    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(make_config(vocab, dropout))
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, model.config.d_model ** -0.5)
    return model


# --------------------------------------------------------------------------------------------------- pretraining
def source_pieces(path, length):
    """The training split's sources (whole, not cut to the fine-tuning length), without their eos, in pieces of at
    most `length` tokens; pieces under 16 tokens are dropped."""
    with h5py.File(path, "r") as f:
        off, tok = f["train/source_offsets"][:], f["train/source_tokens"][:]
    pieces = []
    for i in range(len(off) - 1):
        doc = tok[off[i]:off[i + 1] - 1].astype(np.int64)
        pieces.extend(doc[k:k + length] for k in range(0, len(doc), length) if len(doc[k:k + length]) >= 16)
    return pieces


def span_corrupt(tokens, vocab, rng, density=0.15, mean_span=3.0):
    """T5's span corruption: about `density` of the tokens in spans of mean length `mean_span`, each span replaced by
    the next sentinel (the last id of the vocabulary first, as T5's <extra_id_0>) in the source, and the target the
    sentinels each followed by its span; both end with eos (1)."""
    n = len(tokens)
    noise = max(1, int(round(n * density)))
    spans = max(1, int(round(noise / mean_span)))
    # noise and kept tokens each cut into `spans` nonempty runs at random, then interleaved (kept run first)
    def runs(total, count):
        cuts = np.sort(rng.choice(np.arange(1, total), size=count - 1, replace=False)) if count > 1 else np.array([], int)
        return np.diff(np.concatenate([[0], cuts, [total]]))
    noise_runs, kept_runs = runs(noise, spans), runs(n - noise, spans)
    source, target, at = [], [], 0
    for k in range(spans):
        source.extend(tokens[at:at + kept_runs[k]])
        at += kept_runs[k]
        sentinel = vocab - 1 - k
        source.append(sentinel)
        target.append(sentinel)
        target.extend(tokens[at:at + noise_runs[k]])
        at += noise_runs[k]
    return np.array(source + [1], dtype=np.int64), np.array(target + [1], dtype=np.int64)


def pretrain(a, vocab, out_path):
    """The model every arm fine-tunes from: span corruption in fp32, transformers' Adafactor on fp32 weights."""
    from transformers.optimization import Adafactor

    torch.set_num_threads(a["pretrain_threads"])
    t_cpu, t_wall = time.process_time(), time.time()
    pieces = source_pieces(os.path.join(a["data"], "summary.h5"), a["src_len"] - 1)
    rng = np.random.default_rng(4321)
    model = new_model(vocab, seed=4321)
    opt = Adafactor(model.parameters(), lr=a["pretrain_lr"], **ADAFACTOR)
    steps, losses = a["pretrain_steps"], []
    held_out = [span_corrupt(p, vocab, np.random.default_rng(99)) for p in pieces[-64:]]
    pieces = pieces[:-64]  # the last 64 pieces: the pretraining's own held-out loss
    for step in range(steps):
        batch = [span_corrupt(pieces[i], vocab, rng) for i in rng.choice(len(pieces), a["batch"], replace=False)]
        src, mask, lab = collate(batch)
        loss = token_loss(model, src, mask, lab)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a["max_grad_norm"])
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step, steps, a["pretrain_lr"])
        opt.step()
        losses.append(loss.item())
        if (step + 1) % 100 == 0:
            print(f"[pretrain] step {step + 1}: train loss (last 100) {np.mean(losses[-100:]):.3f}", flush=True)
    torch.save(model.state_dict(), out_path)
    result = {"steps": steps, "pieces": len(pieces), "first_loss": losses[0],
              "train_loss_last100_mean": float(np.mean(losses[-100:])),
              "held_out_loss": eval_loss(model, held_out), "cpu_s": time.process_time() - t_cpu,
              "wall_s": time.time() - t_wall, "threads": a["pretrain_threads"]}
    torch.set_num_threads(1)
    return result


def token_loss(model, src, mask, lab, reduction="mean"):
    dec_in = model._shift_right(lab)
    logits = model(input_ids=src, attention_mask=mask, decoder_input_ids=dec_in).logits.float()
    return F.cross_entropy(logits.view(-1, logits.size(-1)), lab.view(-1), ignore_index=-100, reduction=reduction)


@torch.no_grad()
def eval_loss(model, data, batch=16):
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, len(data), batch):
        src, mask, lab = collate(data[i:i + batch])
        tot += token_loss(model, src, mask, lab, reduction="sum").item()
        n += int((lab != -100).sum())
    model.train()
    return tot / n


@torch.no_grad()
def eval_rouge(model, data, sp, max_new_tokens=24, batch=16):
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    model.eval()
    scores, samples = [], []
    def text(ids):
        return sp.decode([int(t) for t in ids if 2 < t < sp.get_piece_size()])
    for i in range(0, len(data), batch):
        chunk = data[i:i + batch]
        src, mask, _ = collate(chunk)
        out = model.generate(input_ids=src, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                             num_beams=1)
        for (s, t), o in zip(chunk, out):
            pred, ref = text(o.tolist()), text(t.tolist())
            scores.append(scorer.score(ref, pred)["rougeL"].fmeasure)
            if len(samples) < 3:
                samples.append({"prediction": pred, "reference": ref})
    model.train()
    return float(np.mean(scores)), samples


def lr_at(step, total, peak, warmup_ratio=0.06):
    """transformers' get_linear_schedule_with_warmup at optimizer step `step` (0-based): the first update has LR 0."""
    warm = math.ceil(warmup_ratio * total)
    if step < warm:
        return peak * step / max(1, warm)
    return peak * max(0.0, (total - step) / max(1, total - warm))


# ------------------------------------------------------------------------------------------------------------ runs
def run_one(job):
    arm, seed, a = job["arm"], job["seed"], job["args"]
    torch.set_num_threads(1)
    from transformers import T5ForConditionalGeneration
    from transformers.optimization import Adafactor
    import sentencepiece as spm

    t_wall, t_cpu = time.time(), time.process_time()
    train, vocab = load_split(os.path.join(a["data"], "summary.h5"), "train", a["src_len"], a["tgt_len"])
    val, _ = load_split(os.path.join(a["data"], "summary.h5"), "validation", a["src_len"], a["tgt_len"])
    test, _ = load_split(os.path.join(a["data"], "summary.h5"), "test", a["src_len"], a["tgt_len"])
    sp = spm.SentencePieceProcessor(model_file=os.path.join(a["data"], "spiece.model"))

    init = T5ForConditionalGeneration(make_config(vocab, a["dropout"]))
    init.load_state_dict(torch.load(a["pretrained"]))  # the pretrained fp32 weights, the same for every run
    model = T5ForConditionalGeneration(make_config(vocab, a["dropout"]))
    model.load_state_dict(init.state_dict())
    params = list(model.parameters())
    with torch.no_grad():  # the bf16 compute copy (every arm), rounded to nearest from the fp32 init
        if a["compute"] == "bf16":
            model.to(torch.bfloat16)
        else:  # emulated: fp32 tensors that hold bf16 values, fp32 arithmetic
            for p in params:
                p.copy_(p.to(torch.bfloat16))
    if arm == "fp32-master":
        masters = [p.detach().float().clone() for p in init.parameters()]  # the exact fp32 init
        for m in masters:
            m.requires_grad_(False)
        opt = Adafactor(masters, lr=a["lr"], **ADAFACTOR)
    else:
        opt = Adafactor16(params, writeback="sr" if arm == "bf16-sr" else "rne",
                          generator=torch.Generator().manual_seed(10_000 + seed))
    del init

    order = batch_order(len(train), a["batch"], a["steps"], seed)
    torch.manual_seed(seed + 1)  # dropout streams: equal across the arms of a seed
    curve, train_losses = [], []
    step_time = 0.0
    for step in range(a["steps"]):
        if step % a["eval_every"] == 0:
            curve.append({"step": step, "val_loss": eval_loss(model, val)})
        t0 = time.process_time()
        src, mask, lab = collate([train[i] for i in order[step]])
        loss = token_loss(model, src, mask, lab)
        for p in params:
            p.grad = None
        loss.backward()
        grads = [p.grad.to(torch.bfloat16).float() for p in params]  # bf16 gradients (emulated: rounded)
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        coef = (a["max_grad_norm"] / (norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef)
        lr = lr_at(step, a["steps"], a["lr"])
        if arm == "fp32-master":
            for m, g in zip(masters, grads):
                m.grad = g
            for grp in opt.param_groups:
                grp["lr"] = lr
            opt.step()
            with torch.no_grad():
                for p, m in zip(params, masters):
                    p.copy_(m.to(torch.bfloat16))  # the bf16 compute copy, rounded to nearest
        else:
            opt.step(grads, lr, count_stalled=(step % 10 == 0))
        step_time += time.process_time() - t0
        train_losses.append(loss.item())
    final_val = eval_loss(model, val)
    curve.append({"step": a["steps"], "val_loss": final_val})
    best = min(curve, key=lambda c: c["val_loss"])
    res = {"arm": arm, "seed": seed, "steps": a["steps"], "final_val_loss": final_val,
           "best_val_loss": best["val_loss"], "best_val_step": best["step"],
           "test_loss": eval_loss(model, test), "curve": curve,
           "train_loss_last50_mean": float(np.mean(train_losses[-50:])),
           "train_step_cpu_s_mean": step_time / a["steps"]}
    if isinstance(opt, Adafactor16) and opt.stalled[1]:
        res["stalled_update_fraction"] = opt.stalled[0] / opt.stalled[1]
    if arm == "fp32-master":
        # how far the bf16 compute copy is from its masters, and the masters' own validation loss
        res["max_rel_master_vs_copy"] = max(((p.float() - m).abs() / m.abs().clamp_min(1e-12)).max().item()
                                            for p, m in zip(params, masters))
    if not a["no_rouge"]:
        res["rougeL_heldout"], res["samples"] = eval_rouge(model, val + test, sp)
    res["cpu_s"] = time.process_time() - t_cpu
    res["wall_s"] = time.time() - t_wall
    print(f"[{arm} seed {seed}] val {final_val:.4f} (best {best['val_loss']:.4f} at {best['step']}) test {res['test_loss']:.4f} "
          f"rougeL {res.get('rougeL_heldout', float('nan')):.4f} cpu {res['cpu_s']:.0f}s", flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="folder with summary.h5 and spiece.model")
    ap.add_argument("--steps", type=int, default=400, help="fine-tuning steps")
    ap.add_argument("--pretrain-steps", type=int, default=1000)
    ap.add_argument("--pretrain-lr", type=float, default=3e-3)
    ap.add_argument("--pretrain-threads", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.1, help="fine-tuning dropout")
    ap.add_argument("--seeds", default="1234,1235")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--src-len", type=int, default=128)
    ap.add_argument("--tgt-len", type=int, default=24)
    ap.add_argument("--max-grad-norm", type=float, default=1.0)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--no-rouge", action="store_true")
    ap.add_argument("--compute", choices=("emulated", "bf16"), default="emulated",
                    help="emulated: fp32 arithmetic on bf16-valued weights, gradients rounded to bf16 (fast on CPUs "
                         "without bf16 instructions); bf16: bf16 tensors and bf16 arithmetic")
    ap.add_argument("--jobs", type=int, default=1, help="runs side by side (each one thread)")
    ap.add_argument("--time-steps", type=int, default=0, help="only time this many training steps per arm")
    args = ap.parse_args()
    torch.set_num_threads(1)
    a = {"data": args.data, "steps": args.steps, "lr": args.lr, "batch": args.batch, "src_len": args.src_len,
         "tgt_len": args.tgt_len, "max_grad_norm": args.max_grad_norm, "eval_every": args.eval_every,
         "no_rouge": args.no_rouge, "compute": args.compute, "dropout": args.dropout,
         "pretrain_steps": args.pretrain_steps, "pretrain_lr": args.pretrain_lr,
         "pretrain_threads": args.pretrain_threads,
         "pretrained": os.path.splitext(os.path.abspath(args.out))[0] + ".pretrained.pt"}
    seeds = [int(s) for s in args.seeds.split(",")]
    arms = args.arms.split(",")
    t_cpu0 = time.process_time()
    _, vocab = load_split(os.path.join(args.data, "summary.h5"), "validation", 8, 8)
    os.makedirs(os.path.dirname(a["pretrained"]), exist_ok=True)
    pretraining = pretrain(dict(a, pretrain_steps=args.pretrain_steps if not args.time_steps else 2), vocab,
                           a["pretrained"])
    print("pretraining:", json.dumps(pretraining), flush=True)
    if args.time_steps:
        a.update(steps=args.time_steps, eval_every=10**9, no_rouge=True)
        for arm in arms:
            r = run_one({"arm": arm, "seed": seeds[0], "args": a})
            print(f"{arm}: {r['train_step_cpu_s_mean']:.3f} CPU s a step")
        return

    checks = {"stochastic_rounding": check_stochastic_rounding()}
    from transformers import T5ForConditionalGeneration
    checks["adafactor_vs_transformers_fp32"] = check_adafactor_equals_transformers(
        lambda: T5ForConditionalGeneration(make_config(vocab)))
    print("checks:", json.dumps(checks), flush=True)
    n_params = sum(p.numel() for p in T5ForConditionalGeneration(make_config(vocab)).parameters())

    jobs = [{"arm": arm, "seed": s, "args": a} for s in seeds for arm in arms]
    if args.jobs > 1:
        with mp.get_context("spawn").Pool(args.jobs) as pool:
            runs = pool.map(run_one, jobs, chunksize=1)
    else:
        runs = [run_one(j) for j in jobs]

    summary = {}
    for arm in arms:
        rs = [r for r in runs if r["arm"] == arm]
        vl = [r["final_val_loss"] for r in rs]
        rl = [r["rougeL_heldout"] for r in rs if "rougeL_heldout" in r]
        bl = [r["best_val_loss"] for r in rs]
        summary[arm] = {"val_loss_mean": float(np.mean(vl)), "val_loss_seed_spread": float(max(vl) - min(vl)),
                        "best_val_loss_mean": float(np.mean(bl)), "best_val_loss_seed_spread": float(max(bl) - min(bl)),
                        "test_loss_mean": float(np.mean([r["test_loss"] for r in rs]))}
        if rl:
            summary[arm].update(rougeL_mean=float(np.mean(rl)), rougeL_seed_spread=float(max(rl) - min(rl)))
    out = {"command": " ".join([os.path.basename(sys.executable)] + sys.argv), "settings": a,
           "adafactor": {k: list(v) if isinstance(v, tuple) else v for k, v in ADAFACTOR.items()},
           "model": {"d_model": 128, "d_kv": 32, "num_heads": 4, "d_ff": 512, "num_layers": 3,
                     "feed_forward": "gated-gelu", "tie_word_embeddings": False, "vocab_size": vocab,
                     "lm_head_init_std": 128 ** -0.5,
                     "parameters": n_params},
           "environment": {"torch": torch.__version__, "python": platform.python_version(),
                           "cpu": platform.processor() or platform.machine(), "threads_per_run": 1,
                           "jobs": args.jobs},
           "checks": checks, "pretraining": pretraining, "summary": summary, "runs": runs,
           "cpu_s_total": time.process_time() - t_cpu0 + sum(r["cpu_s"] for r in runs) * (args.jobs > 1)}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
