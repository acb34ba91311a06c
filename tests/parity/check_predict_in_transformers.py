"""t5scale-ckpt predict against transformers' generate on the exported model, and its file contract.

A tiny model is trained briefly on the quickstart's sample (a SentencePiece tokenizer trained by t5scale-prep,
sources cut to 96 tokens); its checkpoint is run by `t5scale-ckpt predict` on a file of inputs (sources with and
without the recipe's prefix, one longer than the cut, an empty and a blank line, a CRLF line, no newline after
the last line), greedy and with 3 and 4 beams at three length penalties. Checked:
  - every output line equals the text transformers generates (model.generate(num_beams=N, do_sample=False,
    length_penalty=L, early_stopping=False), each input alone, cut as the run cut it) on the folder that
    `t5scale-ckpt export` wrote, decoded by its slow T5Tokenizer as t5scale decodes (pad and eos left out);
  - one output line per input line, in order; empty and blank inputs give empty lines;
  - the outputs are the same for --batch 1, 3 and 16 (greedy and beams);
  - refusals name what is wrong: a missing input file, a run without a tokenizer (naming --tokenizer), a
    --tokenizer file that does not exist, --out naming the input, --tokenizer none, a bad --beams.

usage: check_predict_in_transformers.py --source DIR --bin BUILD/bin --work DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

MAX_SOURCE_TOKENS = 96
MAX_NEW_TOKENS = 24
DECODINGS = [(1, 1.0), (3, 1.0), (4, 1.0), (4, 0.6), (3, 2.0)]


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)  # to stderr, exit status 1


def run(command, expect=0):
    result = subprocess.run(command, capture_output=True, text=True)
    output = result.stdout + result.stderr
    if expect == 0:
        check(result.returncode == 0, f"{' '.join(command)}: exit {result.returncode}\n{output[-3000:]}")
    else:
        check(result.returncode != 0, f"{' '.join(command)}: accepted, expected a refusal\n{output[-3000:]}")
    return output


def make_inputs(source, path):
    """Twelve lines: sources of the sample as the recipe renders them ("summarize: " + text) and without the prefix,
    one repeated past the cut, an empty and a blank line, a CRLF line, and no newline at the end."""
    with open(os.path.join(source, "jobs/quickstart/my_data.jsonl")) as f:
        texts = [json.loads(line)["text"] for line in f][-9:]
    lines = ["summarize: " + t for t in texts[:5]] + [texts[5], "", "   "]
    lines += ["summarize: " + " ".join(texts[6:9]), "summarize: " + texts[0] + "\r", "Oslo", "summarize: " + texts[8]]
    with open(path, "w", newline="") as f:
        f.write("\n".join(lines))  # no newline after the last line
    return [line.rstrip("\r") for line in lines]


def transformers_lines(exported, inputs, beams, length_penalty):
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(exported, use_fast=False)
    model = AutoModelForSeq2SeqLM.from_pretrained(exported).eval()
    lines = []
    for text in inputs:
        if not text.strip():
            lines.append("")
            continue
        ids = tokenizer(text, truncation=True, max_length=MAX_SOURCE_TOKENS).input_ids
        with torch.no_grad():
            generated = model.generate(input_ids=torch.tensor([ids]), do_sample=False, num_beams=beams,
                                       length_penalty=length_penalty, early_stopping=False,
                                       max_new_tokens=MAX_NEW_TOKENS, min_length=0)[0].tolist()
        # t5scale's text: the tokens after the decoder start up to eos, sentinels written as text.
        pieces = []
        for token in generated[1:]:
            if token == 1:
                break
            if token != 0:
                pieces.append(token)
        lines.append(tokenizer.decode(pieces, skip_special_tokens=False))
    return lines


def read_lines(path):
    with open(path, newline="") as f:
        text = f.read()
    check(text.endswith("\n"), f"{path} does not end with a newline")
    return text[:-1].split("\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--bin", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ckpt = os.path.join(args.bin, "t5scale-ckpt")
    dataset, tokenizer = os.path.join(work, "data.h5"), os.path.join(work, "tokenizer.model")
    run([os.path.join(args.bin, "t5scale-prep"), "--recipe", os.path.join(args.source, "jobs/quickstart/recipe.yaml"),
         "--input", os.path.join(args.source, "jobs/quickstart/my_data.jsonl"), "--out", dataset, "--train-tokenizer",
         "--tokenizer-out", tokenizer, "--vocab-size", "200", "--progress", "none"])
    train = [os.path.join(args.bin, "t5scale-train"), "--set", f"run.output_dir={work}", "--set", "precision=fp32",
             "--set", "eval.every_steps=0", "--set", "eval.at_end=false", "--set", "train.log_every=20",
             "--set", "checkpoint.resume=never"]
    run(train + ["--set", "run.name=trained", "--set", f"data.dataset={dataset}", "--set", "train.max_steps=60",
                 "--set", "train.global_batch=16", "--set", "optimizer.lr=3e-3", "--set", "model.dropout_rate=0",
                 "--set", f"data.max_source_length={MAX_SOURCE_TOKENS}", "--set", "checkpoint.every_steps=60",
                 "--set", f"eval.max_new_tokens={MAX_NEW_TOKENS}"])
    checkpoint = os.path.join(work, "trained.ckpt")
    inputs_path = os.path.join(work, "inputs.txt")
    inputs = make_inputs(args.source, inputs_path)

    outputs = {}
    for beams, length_penalty in DECODINGS:
        for batch in (16, 3, 1):
            out = os.path.join(work, f"beams{beams}_lp{length_penalty:g}_batch{batch}.txt")
            said = run([ckpt, "predict", checkpoint, "--input", inputs_path, "--out", out, "--beams", str(beams),
                        "--length-penalty", str(length_penalty), "--batch", str(batch)])
            lines = read_lines(out)
            check(len(lines) == len(inputs), f"{out}: {len(lines)} lines for {len(inputs)} inputs")
            check(f"{len(inputs)} lines for the {len(inputs)} lines" in said and "2 without text" in said,
                  f"predict says:\n{said}")
            key = (beams, length_penalty)
            if key in outputs:
                differing = [i for i, (a, b) in enumerate(zip(outputs[key], lines)) if a != b]
                check(not differing, f"beams {beams}, length penalty {length_penalty}: --batch {batch} changes "
                                     f"lines {differing}: {[lines[i] for i in differing]} against "
                                     f"{[outputs[key][i] for i in differing]}")
            else:
                outputs[key] = lines
    check("note: 2 of 12 input lines do not begin with 'summarize: '" in said, f"no note of the prefix:\n{said}")
    check(f"1 input(s) cut to data.max_source_length {MAX_SOURCE_TOKENS} tokens" in said, f"predict says:\n{said}")
    check(f"at most {MAX_NEW_TOKENS} new tokens" in said, f"the run's eval.max_new_tokens is not the default:\n{said}")
    check(outputs[(1, 1.0)] != outputs[(4, 1.0)], "4 beams generate what greedy decoding does on every input")

    exported = os.path.join(work, "exported")
    run([ckpt, "export", checkpoint, "--hf", exported])
    import transformers
    for (beams, length_penalty), ours in outputs.items():
        theirs = transformers_lines(exported, inputs, beams, length_penalty)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            check(a == b, f"beams {beams}, length penalty {length_penalty}, line {i + 1} ({inputs[i][:60]!r}): "
                          f"t5scale predicts {a!r}, transformers {transformers.__version__} generates {b!r}")
    empty = [i + 1 for i, text in enumerate(inputs) if not text.strip()]
    check(all(outputs[(1, 1.0)][i - 1] == "" for i in empty), "an empty input gave a non-empty line")
    print(f"predict: {len(inputs)} lines, {len(DECODINGS)} decodings x batch 16, 3, 1 the same; each line equals "
          f"transformers {transformers.__version__}' generate on the export, e.g. {outputs[(4, 1.0)][0]!r}")

    # Refusals, each naming what is wrong.
    out = os.path.join(work, "refused.txt")
    missing = os.path.join(work, "no_such_inputs.txt")
    said = run([ckpt, "predict", checkpoint, "--input", missing, "--out", out], expect=1)
    check(missing in said and "--input" in said, f"a missing input file:\n{said}")
    said = run([ckpt, "predict", checkpoint, "--input", inputs_path, "--out", inputs_path], expect=1)
    check("is the input file" in said, f"--out naming the input:\n{said}")
    said = run([ckpt, "predict", checkpoint, "--input", inputs_path, "--out", out, "--tokenizer",
                os.path.join(work, "gone.model")], expect=1)
    check("gone.model" in said and "no such file" in said and "--tokenizer FILE" in said,
          f"a missing --tokenizer:\n{said}")
    said = run([ckpt, "predict", checkpoint, "--input", inputs_path, "--out", out, "--tokenizer", "none"], expect=1)
    check("--tokenizer none is for export" in said, f"--tokenizer none:\n{said}")
    said = run([ckpt, "predict", checkpoint, "--input", inputs_path, "--out", out, "--beams", "0"], expect=1)
    check("--beams" in said, f"--beams 0:\n{said}")
    run(train + ["--set", "run.name=synthetic", "--set", "train.max_steps=2", "--set", "checkpoint.every_steps=2"])
    said = run([ckpt, "predict", os.path.join(work, "synthetic.ckpt"), "--input", inputs_path, "--out", out],
               expect=1)
    check("--tokenizer FILE" in said and "synthetic" in said, f"a run without a tokenizer:\n{said}")
    check(not os.path.exists(out), f"a refused predict wrote {out}")
    print("predict: a missing input, --out naming the input, a missing --tokenizer, --tokenizer none, --beams 0 and "
          "a run without a tokenizer refused, each named")


if __name__ == "__main__":
    main()
