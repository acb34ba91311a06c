"""Forward and training FLOPs of transformers' T5ForConditionalGeneration, counted by PyTorch's FlopCounterMode,
for the cost model's test. Writes JSON: one entry per case with the model shape, the batch shape and the counts."""
import json
import sys

import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

CASES = [
    # v1.0: ReLU, tied embeddings, inner = d_model
    dict(name="v1_0", config=dict(vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=3,
                                  num_heads=4, feed_forward_proj="relu", tie_word_embeddings=True),
         rows=3, source_length=11, target_length=7),
    # v1.1: gated GELU, untied, heads x d_kv != d_model (as t5-3b / t5-11b)
    dict(name="v1_1", config=dict(vocab_size=128, d_model=48, d_kv=16, d_ff=80, num_layers=3, num_decoder_layers=2,
                                  num_heads=6, feed_forward_proj="gated-gelu", tie_word_embeddings=False),
         rows=2, source_length=9, target_length=13),
]


def count(case):
    torch.manual_seed(0)
    config = transformers.T5Config(dropout_rate=0.0, decoder_start_token_id=0, **case["config"])
    model = transformers.T5ForConditionalGeneration(config).train()
    vocab = case["config"]["vocab_size"]
    input_ids = torch.randint(2, vocab, (case["rows"], case["source_length"]))
    labels = torch.randint(2, vocab, (case["rows"], case["target_length"]))
    with FlopCounterMode(display=False) as forward_counter:
        loss = model(input_ids=input_ids, labels=labels).loss
    with FlopCounterMode(display=False) as backward_counter:
        loss.backward()
    return forward_counter.get_total_flops(), backward_counter.get_total_flops()


def main():
    out = {"torch": torch.__version__, "transformers": transformers.__version__, "cases": []}
    for case in CASES:
        forward, backward = count(case)
        out["cases"].append(dict(case, forward_flops=forward, backward_flops=backward))
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
