"""Reference data for t5scale's parity tests, made with Hugging Face transformers.

For each case: a randomly initialised T5ForConditionalGeneration saved with save_pretrained (config.json +
model.safetensors) into OUT/<case>/model, and OUT/<case>/reference.safetensors with the inputs, the logits, the
loss, the gradient of every parameter (named as in the checkpoint, prefixed "grad/") and the greedy generation.
The same logits, loss and gradients computed in fp64 are stored under "fp64/". The reference file's metadata records the format version and the versions of everything that made it.

usage: make_parity_fixtures.py OUT_DIR
"""
import json
import os
import platform
import sys

import safetensors.torch
import torch
import transformers
from transformers import T5Config, T5ForConditionalGeneration

FORMAT_VERSION = "1"
MAX_NEW_TOKENS = 12

# Small shapes with odd head and layer counts, inner dimension != d_model, more decoder than encoder positions
# than the bias buckets cover exactly, and a vocabulary that is not a power of two. (transformers 4.57 sizes its
# generation cache by num_layers, so the decoder is never deeper than the encoder here.)
CASES = {
    "t5_v1_0": dict(vocab_size=101, d_model=48, d_kv=10, d_ff=72, num_layers=5, num_decoder_layers=3, num_heads=3,
                    relative_attention_num_buckets=8, relative_attention_max_distance=20,
                    feed_forward_proj="relu", tie_word_embeddings=True),
    "t5_v1_1": dict(vocab_size=97, d_model=40, d_kv=8, d_ff=56, num_layers=3, num_decoder_layers=3, num_heads=5,
                    relative_attention_num_buckets=12, relative_attention_max_distance=24,
                    feed_forward_proj="gated-gelu", tie_word_embeddings=False),
}


def make_inputs(vocab_size, generator):
    batch, source_length, target_length = 3, 19, 11
    source_lengths = [19, 12, 5]  # padding inside the batch
    target_lengths = [11, 7, 3]
    input_ids = torch.randint(3, vocab_size, (batch, source_length), generator=generator)
    attention_mask = torch.zeros(batch, source_length, dtype=torch.long)
    labels = torch.randint(3, vocab_size, (batch, target_length), generator=generator)
    for row, (s, t) in enumerate(zip(source_lengths, target_lengths)):
        attention_mask[row, :s] = 1
        input_ids[row, s:] = 0
        labels[row, t - 1] = 1  # eos
        labels[row, t:] = -100
    return input_ids, attention_mask, labels


def train_briefly(model, vocab_size, generator, steps=200):
    """A few Adam steps on a copy task, so that greedy generations depend on the input and end with eos
    (a purely random T5 tends to repeat one token whatever it reads)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        length = int(torch.randint(6, 16, (1,), generator=generator))
        source = torch.randint(3, vocab_size, (8, length), generator=generator)
        labels = torch.cat([source, torch.ones(8, 1, dtype=torch.long)], dim=1)
        loss = model(input_ids=source, attention_mask=torch.ones_like(source), labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.zero_grad(set_to_none=True)


def make_case(name, shape, out_dir, seed):
    torch.manual_seed(seed)
    config = T5Config(dropout_rate=0.1, layer_norm_epsilon=1e-6, pad_token_id=0, eos_token_id=1,
                      decoder_start_token_id=0, initializer_factor=1.0, **shape)
    model = T5ForConditionalGeneration(config).float()
    # Make norms and biases non-trivial so that a wrongly mapped norm weight cannot go unnoticed.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "layer_norm" in pname:
                p.uniform_(0.5, 1.5)
    train_briefly(model, config.vocab_size, torch.Generator().manual_seed(seed + 2))
    model.eval()  # dropout off: the reference is deterministic (gradients still flow)
    case_dir = os.path.join(out_dir, name)
    model.save_pretrained(os.path.join(case_dir, "model"), safe_serialization=True)

    generator = torch.Generator().manual_seed(seed + 1)
    input_ids, attention_mask, labels = make_inputs(config.vocab_size, generator)
    output = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    output.loss.backward()
    with torch.no_grad():
        generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False, num_beams=1,
                                   max_new_tokens=MAX_NEW_TOKENS, min_length=0)

    tensors = {
        "input_ids": input_ids, "attention_mask": attention_mask, "labels": labels,
        "decoder_input_ids": model._shift_right(labels),
        "logits": output.logits.detach(), "loss": output.loss.detach().reshape(1),
        "generated": generated,
    }
    for pname, p in model.named_parameters():
        tensors["grad/" + pname] = p.grad.detach().clone()

    # The same model in fp64: fp32 gradients that pass through cancellations (attention keys behind the
    # softmax's shift invariance) carry rounding errors of their own; fp64 pins down the function itself.
    model64 = T5ForConditionalGeneration.from_pretrained(os.path.join(case_dir, "model")).double().eval()
    output64 = model64(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    output64.loss.backward()
    tensors["fp64/logits"] = output64.logits.detach()
    tensors["fp64/loss"] = output64.loss.detach().reshape(1)
    for pname, p in model64.named_parameters():
        tensors["fp64/grad/" + pname] = p.grad.detach().clone()
    metadata = {
        "format_version": FORMAT_VERSION,
        "generator": os.path.basename(__file__),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "max_new_tokens": str(MAX_NEW_TOKENS),
        "config": json.dumps(shape),
    }
    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()},
                                os.path.join(case_dir, "reference.safetensors"), metadata=metadata)
    print(f"{name}: loss {output.loss.item():.6f}, logits {tuple(output.logits.shape)}, "
          f"generated {tuple(generated.shape)}")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    # One intra-op thread, as the C++ side uses for its fp64 comparison: T5's norm reduces its variance in fp32, in an
    # order that depends on the thread count, and the fp64 gradients are compared at 1e-10.
    torch.set_num_threads(1)
    for seed, (name, shape) in enumerate(CASES.items()):
        make_case(name, shape, out_dir, seed=100 + seed)
    with open(os.path.join(out_dir, "cases.txt"), "w") as f:
        f.write("\n".join(CASES) + "\n")


if __name__ == "__main__":
    main()
