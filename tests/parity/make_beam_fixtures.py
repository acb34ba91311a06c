"""Reference generations for t5scale's beam search, made with Hugging Face transformers' generate.

For each case of make_parity_fixtures.py, its model as that maker trained it briefly on its copy task (so that some
hypotheses end in eos and others run to the token limit), loaded from PARITY_DIR/<case>/model (unit.python_references
runs that maker first; training the models again here was 18 s of the suite) and saved with save_pretrained into
OUT/<case>/model, and OUT/<case>/reference.safetensors with a padded batch of inputs and, for each decoding of
DECODINGS, the sequences of model.generate(num_beams=N, do_sample=False, length_penalty=L, early_stopping=False)
under "beams<N>_lp<L>" (transformers fills a row after its eos with eos). The metadata records the format version,
the decodings and the versions of everything that made it. The cases are the folders of OUT_DIR.

usage: make_beam_fixtures.py OUT_DIR PARITY_DIR
"""
import json
import os
import platform
import sys

import safetensors.torch
import torch
import transformers
from transformers import T5ForConditionalGeneration

from make_parity_fixtures import CASES, make_inputs

FORMAT_VERSION = "1"
MAX_NEW_TOKENS = 24
# (beams, length penalty): greedy through beam search's own path (1 beam), the default penalty, one that favours
# short hypotheses, one that favours long ones.
DECODINGS = [(1, 1.0), (3, 1.0), (4, 1.0), (3, 0.6), (4, 2.0), (4, -0.5)]


def decoding_name(beams, length_penalty):
    return f"beams{beams}_lp{length_penalty:g}"


def make_case(name, shape, out_dir, parity_dir, seed):
    trained = os.path.join(parity_dir, name, "model")
    if not os.path.isfile(os.path.join(trained, "config.json")):
        sys.exit(f"make_beam_fixtures.py: {trained} holds no model: make_parity_fixtures.py makes it first")
    model = T5ForConditionalGeneration.from_pretrained(trained).float()
    model.eval()
    case_dir = os.path.join(out_dir, name)
    model.save_pretrained(os.path.join(case_dir, "model"), safe_serialization=True)
    # More rows than make_parity_fixtures' batch: two padded batches of 3 stacked, sources of 5 to 19 tokens.
    inputs = [make_inputs(model.config.vocab_size, torch.Generator().manual_seed(seed + k)) for k in (1, 5)]
    input_ids = torch.cat([ids for ids, _, _ in inputs])
    attention_mask = torch.cat([mask for _, mask, _ in inputs])
    tensors = {"input_ids": input_ids, "attention_mask": attention_mask}
    ended = {}
    with torch.no_grad():
        for beams, length_penalty in DECODINGS:
            generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False,
                                       num_beams=beams, length_penalty=length_penalty, early_stopping=False,
                                       max_new_tokens=MAX_NEW_TOKENS, min_length=0)
            tensors[decoding_name(beams, length_penalty)] = generated
            ended[decoding_name(beams, length_penalty)] = int((generated[:, 1:] == 1).any(dim=1).sum())
    decodings = [[beams, length_penalty, decoding_name(beams, length_penalty)] for beams, length_penalty in DECODINGS]
    metadata = dict(format_version=FORMAT_VERSION, generator=os.path.basename(__file__), config=json.dumps(shape),
                    model_from="make_parity_fixtures.py",
                    max_new_tokens=str(MAX_NEW_TOKENS), decodings=json.dumps(decodings))
    metadata.update(torch=torch.__version__, transformers=transformers.__version__, python=platform.python_version())
    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()},
                                os.path.join(case_dir, "reference.safetensors"), metadata=metadata)
    print(f"{name}: {input_ids.shape[0]} rows; rows ending in eos per decoding {ended}")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # the same sums, in the same order, on every machine
    for offset, name in enumerate(CASES):
        make_case(name, CASES[name], sys.argv[1], sys.argv[2], seed=300 + offset)


if __name__ == "__main__":
    main()
