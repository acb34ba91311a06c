"""Reference data for loading Hugging Face models by name and from torch.save files (tests/io/test_hf_formats.cpp).

Tiny randomly initialised T5ForConditionalGeneration models (fixed seeds, the shapes of make_parity_fixtures.py), each
saved by transformers in a layout that t5scale reads besides a plain model.safetensors folder:
  hub_cache    model.safetensors in a Hugging Face cache laid out as huggingface_hub downloads it (files in blobs/,
               linked from OUT/hub/models--t5scale-test--tiny-t5/snapshots/<commit>/, refs/main naming the commit),
               beside a newer snapshot of other weights that refs/main does not name; loaded by name with
               HF_HUB_CACHE=OUT/hub
  bin          pytorch_model.bin (save_pretrained(..., safe_serialization=False)), tied embeddings
  bin_sharded  pytorch_model-0000N-of-0000M.bin and pytorch_model.bin.index.json (a small max_shard_size), untied
  bin_bf16     pytorch_model.bin of bfloat16 tensors (the reference is the same weights in fp32)
For each case, OUT/<case>/reference.safetensors holds the inputs and transformers' fp32 logits; its metadata records
the format version and the versions of everything that made it. OUT/cases.txt has one "case name|folder init_from"
per line (a folder relative to OUT).

usage: make_format_fixtures.py OUT_DIR
"""
import hashlib
import os
import platform
import shutil
import sys
import tempfile

import safetensors.torch
import torch
import transformers
from transformers import T5Config, T5ForConditionalGeneration

from make_parity_fixtures import CASES, make_inputs

FORMAT_VERSION = "1"
CACHE_NAME = "t5scale-test/tiny-t5"


def build_model(shape, seed):
    torch.manual_seed(seed)
    config = T5Config(dropout_rate=0.0, layer_norm_epsilon=1e-6, pad_token_id=0, eos_token_id=1,
                      decoder_start_token_id=0, initializer_factor=1.0, **shape)
    model = T5ForConditionalGeneration(config).float().eval()
    # Norm weights away from 1, so that a wrongly mapped norm cannot go unnoticed.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.uniform_(0.5, 1.5)
    return model


def save_in_cache(model, hub, name, commit):
    """save_pretrained into the cache as huggingface_hub lays a download out: each file in blobs/ under its hash,
    linked from snapshots/<commit>/."""
    repo = os.path.join(hub, "models--" + name.replace("/", "--"))
    snapshot = os.path.join(repo, "snapshots", commit)
    os.makedirs(os.path.join(repo, "blobs"), exist_ok=True)
    os.makedirs(snapshot)
    with tempfile.TemporaryDirectory() as saved:
        model.save_pretrained(saved, safe_serialization=True)
        for file in os.listdir(saved):
            with open(os.path.join(saved, file), "rb") as f:
                blob = hashlib.sha256(f.read()).hexdigest()
            shutil.move(os.path.join(saved, file), os.path.join(repo, "blobs", blob))
            os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(snapshot, file))
    return repo


def write_reference(case_dir, model, shape, seed):
    input_ids, attention_mask, labels = make_inputs(shape["vocab_size"], torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).logits
    tensors = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels,
               "decoder_input_ids": model._shift_right(labels), "logits": logits}
    metadata = {"format_version": FORMAT_VERSION, "generator": os.path.basename(__file__),
                "torch": torch.__version__, "transformers": transformers.__version__,
                "safetensors": safetensors.__version__, "python": platform.python_version()}
    os.makedirs(case_dir, exist_ok=True)
    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()},
                                os.path.join(case_dir, "reference.safetensors"), metadata=metadata)
    print(f"{os.path.basename(case_dir)}: logits {tuple(logits.shape)}")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    torch.set_num_threads(1)
    cases = []

    # hub_cache: main's snapshot, and a newer one of other weights that a wrong choice would load.
    shape, seed = CASES["t5_v1_0"], 300
    model = build_model(shape, seed)
    main_commit = hashlib.sha1(b"main").hexdigest()
    repo = save_in_cache(model, os.path.join(out_dir, "hub"), CACHE_NAME, main_commit)
    newer = save_in_cache(build_model(shape, seed + 50), os.path.join(out_dir, "hub"), CACHE_NAME,
                          hashlib.sha1(b"newer").hexdigest())
    assert newer == repo
    os.makedirs(os.path.join(repo, "refs"))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(main_commit)
    stamp = os.path.getmtime(os.path.join(repo, "snapshots", main_commit))
    os.utime(os.path.join(repo, "snapshots", hashlib.sha1(b"newer").hexdigest()), (stamp + 60, stamp + 60))
    write_reference(os.path.join(out_dir, "hub_cache"), model, shape, seed)
    cases.append(("hub_cache", "name", CACHE_NAME))

    # bin: tied embeddings (shared, encoder and decoder embed_tokens share one storage in the file).
    model = build_model(shape, seed + 1)
    model.save_pretrained(os.path.join(out_dir, "bin", "model"), safe_serialization=False)
    write_reference(os.path.join(out_dir, "bin"), model, shape, seed + 1)
    cases.append(("bin", "folder", "bin/model"))

    # bin_sharded: untied, gated-GELU, in shards of at most 50 kB.
    shape = CASES["t5_v1_1"]
    model = build_model(shape, seed + 2)
    model.save_pretrained(os.path.join(out_dir, "bin_sharded", "model"), safe_serialization=False,
                          max_shard_size="50kB")
    shards = [f for f in os.listdir(os.path.join(out_dir, "bin_sharded", "model")) if f.endswith(".bin")]
    assert len(shards) > 1, f"one shard only: {shards}"
    write_reference(os.path.join(out_dir, "bin_sharded"), model, shape, seed + 2)
    cases.append(("bin_sharded", "folder", "bin_sharded/model"))

    # bin_bf16: bfloat16 tensors; the reference runs the same (rounded) weights in fp32.
    model = build_model(shape, seed + 3).to(torch.bfloat16)
    model.save_pretrained(os.path.join(out_dir, "bin_bf16", "model"), safe_serialization=False)
    write_reference(os.path.join(out_dir, "bin_bf16"), model.float(), shape, seed + 3)
    cases.append(("bin_bf16", "folder", "bin_bf16/model"))

    with open(os.path.join(out_dir, "cases.txt"), "w") as f:
        f.write("".join(f"{case} {kind} {init_from}\n" for case, kind, init_from in cases))


if __name__ == "__main__":
    main()
