"""Loads each checkpoint that t5scale exported (OUT/<case>/exported) with transformers and checks that it
computes the logits t5scale computed (relative error <= 1e-5 in fp32), with no missing or unexpected tensors.

usage: check_export_in_transformers.py FIXTURES_DIR
"""
import os
import sys

import safetensors.torch
import torch
from transformers import T5ForConditionalGeneration

RELATIVE_TOLERANCE = 1e-5


def check(case_dir):
    exported = os.path.join(case_dir, "exported")
    model, info = T5ForConditionalGeneration.from_pretrained(exported, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        return f"loading info not clean: {problems}"
    model.eval()
    reference = safetensors.torch.load_file(os.path.join(case_dir, "reference.safetensors"))
    ours = safetensors.torch.load_file(os.path.join(exported, "t5scale_logits.safetensors"))["logits"]
    with torch.no_grad():
        logits = model(input_ids=reference["input_ids"], attention_mask=reference["attention_mask"],
                       decoder_input_ids=reference["decoder_input_ids"]).logits
    error = (logits.double() - ours.double()).abs().max().item()
    scale = logits.double().abs().max().item()
    relative = error / scale
    worst = int((logits.double() - ours.double()).abs().argmax())
    print(f"{os.path.basename(case_dir)}: exported logits max abs error {error:.3e}, max rel error {relative:.3e}, "
          f"worst element #{worst}")
    if not torch.isfinite(logits).all() or not torch.isfinite(ours).all():
        return "non-finite logits"
    if relative > RELATIVE_TOLERANCE:
        return f"max rel error {relative:.3e} > {RELATIVE_TOLERANCE}"
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    with open(os.path.join(root, "cases.txt")) as f:
        cases = [line.strip() for line in f if line.strip()]
    failures = 0
    for case in cases:
        problem = check(os.path.join(root, case))
        if problem:
            failures += 1
            print(f"{case}: FAILED: {problem}")
    print(f"{len(cases) - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
