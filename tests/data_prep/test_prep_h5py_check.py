"""Reads the dataset that t5scale-prep wrote in PrepProgram.WritesTheRunForThePythonCheck with h5py and checks it
against references written by others: the layout and attribute types of the spec (h5py), every example's ids
(transformers' T5Tokenizer on the same tokenizer file, truncation=True), the length percentiles (numpy's
percentile with method="inverted_cdf", the nearest-rank definition) and the tokenizer hash (hashlib).

usage: test_prep_h5py_check.py DIR   (DIR/run.json names the dataset, tokenizer, inputs and length limits)
"""
import hashlib
import json
import sys

import h5py
import numpy as np
import sentencepiece as spm
from transformers import T5Tokenizer

ROOT_STRINGS = ["format", "tokenizer_sha256", "tokenizer_file", "recipe_name", "recipe_yaml", "created_by",
                "input_files"]
ROOT_INTS = ["schema_version", "vocab_size", "pad_id", "eos_id", "unk_id", "max_source_length", "max_target_length"]
SPLIT_INTS = ["num_examples", "num_source_tokens", "num_target_tokens", "source_length_p50", "source_length_p90",
              "source_length_p99", "source_length_max", "target_length_p50", "target_length_p90",
              "target_length_p99", "target_length_max", "truncated_sources", "truncated_targets",
              "skipped_malformed", "skipped_missing_field", "skipped_empty_target", "skipped_invalid_utf8"]

failures = []


def expect(condition, message):
    if not condition:
        failures.append(message)


def attribute_dtype(obj, name):
    return obj.attrs.get_id(name).dtype


def main(directory):
    with open(f"{directory}/run.json") as f:
        run = json.load(f)
    with open(run["tokenizer"], "rb") as f:
        model_sha256 = hashlib.sha256(f.read()).hexdigest()
    sp = spm.SentencePieceProcessor(model_file=run["tokenizer"])
    tokenizer = T5Tokenizer(vocab_file=run["tokenizer"], extra_ids=100)
    with open(run["recipe"]) as f:
        recipe_text = f.read()

    with h5py.File(run["dataset"], "r") as f:
        for name in ROOT_STRINGS:
            dtype = attribute_dtype(f, name)
            expect(dtype.kind == "S" and h5py.check_string_dtype(dtype).length is not None,
                   f"root attribute {name} must be a fixed-length string, it is {dtype}")
        for name in ROOT_INTS:
            expect(attribute_dtype(f, name) == np.int64, f"root attribute {name} must be int64")
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        expect(attrs["format"] == "t5scale-tokenized-dataset", f"format {attrs['format']}")
        expect(attrs["schema_version"] == 1, "schema_version")
        expect(attrs["tokenizer_sha256"] == model_sha256, f"tokenizer_sha256 {attrs['tokenizer_sha256']} != hashlib {model_sha256}")
        expect(attrs["vocab_size"] == sp.get_piece_size() + 100 == len(tokenizer), "vocab_size")
        expect((attrs["pad_id"], attrs["eos_id"], attrs["unk_id"]) == (0, 1, 2), "pad/eos/unk ids")
        expect(attrs["recipe_yaml"] == recipe_text, "recipe_yaml is the recipe file's text")
        expect(attrs["recipe_name"] == "samsum", "recipe_name")
        expect(attrs["created_by"].startswith("t5scale-prep "), "created_by")
        expect(attrs["max_source_length"] == run["max_source_length"], "max_source_length")
        expect(attrs["max_target_length"] == run["max_target_length"], "max_target_length")
        expect(sorted(k for k in f.keys()) == sorted(run["splits"]), f"splits {list(f.keys())}")

        for split, input_path in run["splits"].items():
            group = f[split]
            for name in SPLIT_INTS:
                expect(attribute_dtype(group, name) == np.int64, f"/{split} attribute {name} must be int64")
            columns = {}
            for kind in ("source", "target"):
                tokens, offsets = group[f"{kind}_tokens"], group[f"{kind}_offsets"]
                expect(tokens.dtype == np.int32 and offsets.dtype == np.int64, f"/{split}/{kind} dtypes")
                expect(tokens.maxshape == (None,) and tokens.chunks is not None and tokens.chunks[0] <= 1 << 20,
                       f"/{split}/{kind}_tokens must be chunked and extendible")
                expect(tokens.compression is None, f"/{split}/{kind}_tokens must be uncompressed")
                columns[kind] = (tokens[:], offsets[:])

            with open(input_path, encoding="utf-8") as lines:
                records = [json.loads(line) for line in lines if line.strip()]
            expect(group.attrs["num_examples"] == len(records), f"/{split} num_examples")
            for kind, template_of, limit in (("source", lambda r: "summarize: " + r["dialogue"], run["max_source_length"]),
                                             ("target", lambda r: r["summary"], run["max_target_length"])):
                tokens, offsets = columns[kind]
                expect(offsets[0] == 0 and np.all(np.diff(offsets) >= 0) and offsets[-1] == len(tokens),
                       f"/{split}/{kind}_offsets")
                expect(len(offsets) == len(records) + 1, f"/{split}/{kind}_offsets length")
                lengths = np.diff(offsets)
                truncated = 0
                for i, record in enumerate(records):
                    text = template_of(record)
                    want = tokenizer(text, truncation=True, max_length=limit).input_ids
                    truncated += len(tokenizer(text).input_ids) > limit
                    got = tokens[offsets[i]:offsets[i + 1]].tolist()
                    if got != want:
                        failures.append(f"/{split} example {i} {kind}: t5scale {got}, T5Tokenizer {want}")
                expect(group.attrs[f"truncated_{kind}s"] == truncated,
                       f"/{split} truncated_{kind}s {group.attrs[f'truncated_{kind}s']} != {truncated}")
                expect(truncated > 0, f"/{split}: the check needs some {kind}s cut")
                expect(group.attrs[f"num_{kind}_tokens"] == len(tokens), f"/{split} num_{kind}_tokens")
                for p in (50, 90, 99):
                    want = int(np.percentile(lengths, p, method="inverted_cdf"))
                    got = group.attrs[f"{kind}_length_p{p}"]
                    expect(got == want, f"/{split} {kind}_length_p{p}: {got}, numpy {want}")
                expect(group.attrs[f"{kind}_length_max"] == lengths.max(), f"/{split} {kind}_length_max")
    if failures:
        print("\n".join(failures[:50]))
        sys.exit(1)
    print(f"{run['dataset']}: layout, attributes, percentiles and every example's ids agree with h5py, numpy and "
          "T5Tokenizer")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
