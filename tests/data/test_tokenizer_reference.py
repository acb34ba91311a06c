"""Reference ids for t5scale's tokenizer, made with Hugging Face transformers' T5Tokenizer and Python sentencepiece.

usage:
  test_tokenizer_reference.py make DIR   writes DIR/corpus.txt, DIR/reference.model (a unigram model trained by
                                         Python sentencepiece with T5's ids and two user symbols) and
                                         DIR/reference.json: for every case text, T5Tokenizer's ids and decode, and
                                         the model file's hashlib sha256.
  test_tokenizer_reference.py check DIR  after the C++ test trained DIR/cpp_trained.model with t5scale's trainer and
                                         wrote its ids to DIR/cpp_trained_ids.json: loads that model in Python
                                         sentencepiece and T5Tokenizer and checks the model's special ids, size and
                                         user symbols, and that T5Tokenizer gives the same ids as t5scale did.
"""
import hashlib
import json
import os
import platform
import random
import sys

import sentencepiece as spm
import transformers
from transformers import T5Tokenizer

FORMAT_VERSION = "1"
PIECES = 400  # pieces of the test models; the vocabulary is PIECES + 100 sentinels + added tokens
USER_SYMBOLS = ["<question>", "<context>"]  # trained into the model as single pieces
ADDED_TOKENS = ["<sep>"]  # not in the model: an added token after the sentinels, as add_tokens(special) numbers it

CASES = [
    "the cat sat on the mat",
    "Summarize: Amanda baked cookies and will bring Jerry some tomorrow.",
    "Numbers 12345 and 3.14, punctuation!? (brackets) [square] {curly} 'quotes'",
    "  leading and trailing whitespace  ",
    "tabs\tand\nnew lines\r\nand   runs   of   spaces",
    "",
    "   ",
    "caf\u00e9 na\u00efve \u2014 \u201cquoted\u201d \u65e5\u672c\u8a9e \U0001F600 unknown characters",
    "Hello <extra_id_0> world",
    "The <extra_id_0> walks in <extra_id_1> park <extra_id_2>",
    "x<extra_id_5>y",
    "a  <extra_id_10>  b",
    "<extra_id_99>",
    "<extra_id_0><extra_id_1>",
    "a\u00a0<extra_id_3>\u3000b",
    "tab\t<extra_id_7>\nnewline",
    "<extra_id_100> and <extra_id_05> and <extra_id_> are not sentinels",
    "<question> who wrote the book <context> the book was written by someone",
    "<question><context>",
    "left <sep> right",
    "<sep>",
    "a<sep>b <extra_id_4> c<question>d",
    "an eos </s> in the text, an <unk> and a <pad>",
    "< question > <questio n> <<question>> <extra_id_1",
]
TRUNCATION_LENGTHS = [2, 5, 17, 64, 200]  # T5Tokenizer(truncation=True, max_length=...) for every case
# Cases whose text comes back exactly from encode then decode (single spaces, known characters).
ROUND_TRIP = [
    "the cat sat on the mat",
    "Summarize: Amanda baked cookies and will bring Jerry some tomorrow.",
    "Hello <extra_id_0> world",
    "The <extra_id_0> walks in <extra_id_1> park <extra_id_2>",
    "<extra_id_99>",
    "<question> who wrote the book <context> the book was written by someone",
    "left <sep> right",
]

SYLLABLES = ["ka", "to", "ri", "mu", "se", "na", "lo", "pe", "di", "gu", "an", "el", "or", "is", "un", "th", "ch",
             "st", "re", "ing", "ed", "er", "ly", "tion", "ar", "om", "ex", "qu", "wo", "ba"]
WORDS = ["the", "cat", "sat", "on", "mat", "Amanda", "baked", "cookies", "and", "will", "bring", "Jerry", "some",
         "tomorrow", "Summarize", "Hello", "world", "walks", "in", "park", "who", "wrote", "book", "context",
         "question", "was", "written", "by", "someone", "left", "right", "Numbers", "punctuation", "brackets",
         "square", "curly", "quotes", "leading", "trailing", "whitespace", "tabs", "new", "lines", "runs", "of",
         "spaces", "unknown", "characters", "an", "eos", "text", "a", "are", "not", "sentinels"]


def write_corpus(path, lines=6000, seed=7):
    rng = random.Random(seed)
    invented = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(1500)]
    with open(path, "w", encoding="utf-8") as out:
        for i in range(lines):
            words = []
            for _ in range(rng.randint(4, 24)):
                pool = WORDS if rng.random() < 0.4 else invented
                word = rng.choice(pool)
                if rng.random() < 0.1:
                    word = word.capitalize()
                words.append(word)
            if i % 5 == 0:
                words.insert(rng.randint(0, len(words)), rng.choice(USER_SYMBOLS))
            if i % 7 == 0:
                words.append(str(rng.randint(0, 99999)))
            out.write(" ".join(words) + rng.choice([".", ",", "!", "?", ":", " (x)", " 'y'", ""]) + "\n")


def t5_tokenizer(model):
    tokenizer = T5Tokenizer(vocab_file=model, extra_ids=100)
    tokenizer.add_tokens(ADDED_TOKENS, special_tokens=True)
    return tokenizer


def versions():
    return {"transformers": transformers.__version__, "sentencepiece": spm.__version__,
            "python": platform.python_version()}


def make(directory):
    os.makedirs(directory, exist_ok=True)
    corpus = os.path.join(directory, "corpus.txt")
    write_corpus(corpus)
    prefix = os.path.join(directory, "reference")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, vocab_size=PIECES, model_type="unigram",
                                   character_coverage=0.9995, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                   user_defined_symbols=USER_SYMBOLS, minloglevel=2)
    model = prefix + ".model"
    tokenizer = t5_tokenizer(model)
    # Long texts (whole paragraphs of the corpus, some with sentinels), where truncation encodes only a prefix.
    with open(corpus, encoding="utf-8") as f:
        lines = f.read().splitlines()
    long_cases = [" ".join(lines[0:60]), "\n".join(lines[60:90]),
                  " <extra_id_0> ".join(lines[90:130]) + " <sep> end"]
    sp = spm.SentencePieceProcessor(model_file=model)
    cases = []
    for text in CASES + long_cases:
        ids = tokenizer(text).input_ids
        truncated = {str(m): tokenizer(text, truncation=True, max_length=m).input_ids for m in TRUNCATION_LENGTHS}
        inner = [i for i in ids if i not in (0, 1)]
        cases.append({"text": text, "ids": ids, "truncated": truncated,
                      # decode is compared where T5Tokenizer writes no <unk>, </s> or <pad> inside the text
                      "decode": tokenizer.decode(inner, skip_special_tokens=False),
                      "decode_comparable": 2 not in ids and ids.count(1) == 1 and 0 not in ids,
                      "round_trip": text in ROUND_TRIP})
    with open(model, "rb") as f:
        sha256 = hashlib.sha256(f.read()).hexdigest()
    reference = {"format_version": FORMAT_VERSION, "versions": versions(), "pieces": sp.get_piece_size(),
                 "vocab_size": len(tokenizer), "user_symbols": USER_SYMBOLS, "added_tokens": ADDED_TOKENS,
                 "sentinel_ids": {str(k): tokenizer.convert_tokens_to_ids(f"<extra_id_{k}>") for k in range(100)},
                 "model_sha256": sha256, "cases": cases}
    with open(os.path.join(directory, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(reference, f, ensure_ascii=False, indent=1)


def check(directory):
    model = os.path.join(directory, "cpp_trained.model")
    with open(os.path.join(directory, "cpp_trained_ids.json"), encoding="utf-8") as f:
        cpp = json.load(f)
    sp = spm.SentencePieceProcessor(model_file=model)
    failures = []
    expect = {"pad_id": (sp.pad_id(), 0), "eos_id": (sp.eos_id(), 1), "unk_id": (sp.unk_id(), 2),
              "bos_id": (sp.bos_id(), -1), "pieces": (sp.get_piece_size(), PIECES)}
    for name, (got, want) in expect.items():
        if got != want:
            failures.append(f"{name}: the trained model has {got}, expected {want}")
    for symbol in USER_SYMBOLS:
        pieces = sp.encode(f"a {symbol} b", out_type=str)
        if symbol not in pieces:
            failures.append(f"user symbol {symbol} is not one piece: {pieces}")
    tokenizer = t5_tokenizer(model)
    if len(tokenizer) != cpp["vocab_size"]:
        failures.append(f"vocab size: T5Tokenizer {len(tokenizer)}, t5scale {cpp['vocab_size']}")
    for case in cpp["cases"]:
        ids = tokenizer(case["text"]).input_ids
        if ids != case["ids"]:
            failures.append(f"{case['text']!r}: T5Tokenizer {ids}, t5scale {case['ids']}")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"{len(cpp['cases'])} cases: t5scale's trained model gives T5Tokenizer's ids ({versions()})")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("make", "check"):
        sys.exit(__doc__)
    (make if sys.argv[1] == "make" else check)(sys.argv[2])
