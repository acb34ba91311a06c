"""Reference values for t5scale's generation metrics, computed by the packages they must match.

ROUGE comes from rouge-score (RougeScorer, tokenize.tokenize), stems from nltk's PorterStemmer, SQuAD exact match
and F1 from transformers' squad_metrics (normalize_answer, compute_exact, compute_f1, get_raw_scores). The inputs
are the fixture files beside this script plus seeded random cases; everything the C++ test needs (inputs and
expected values) goes into one JSON file, with a format version and the versions of the packages that made it.

usage: make_eval_references.py OUT.json
"""
import importlib.metadata
import json
import os
import platform
import random
import sys
import unicodedata

from nltk.stem.porter import PorterStemmer
from rouge_score import rouge_scorer, tokenize
from transformers.data.metrics.squad_metrics import compute_exact, compute_f1, get_raw_scores, normalize_answer

FORMAT_VERSION = 1
HERE = os.path.dirname(os.path.abspath(__file__))
ROUGE_TYPES = ["rouge1", "rouge2", "rougeL", "rougeLsum"]
SEED = 20240611


def read_jsonl(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_words(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def rouge_case(prediction, reference):
    case = {"prediction": prediction, "reference": reference}
    for use_stemmer, key in ((True, "stemmed"), (False, "unstemmed")):
        scorer = rouge_scorer.RougeScorer(ROUGE_TYPES, use_stemmer=use_stemmer)
        scores = scorer.score(reference, prediction)  # rouge-score's order: (target, prediction)
        stemmer = PorterStemmer() if use_stemmer else None
        case[key] = {
            "prediction_tokens": tokenize.tokenize(prediction, stemmer),
            "reference_tokens": tokenize.tokenize(reference, stemmer),
            **{t: [scores[t].precision, scores[t].recall, scores[t].fmeasure] for t in ROUGE_TYPES},
        }
    return case


def mean_scores(cases, key):
    # Summed in order and divided by the count, as t5scale's mean_rouge does (not sum(), whose float algorithm
    # changed in Python 3.12).
    means = {}
    for t in ROUGE_TYPES:
        totals = [0.0, 0.0, 0.0]
        for case in cases:
            for i in range(3):
                totals[i] += case[key][t][i]
        means[t] = [total / len(cases) for total in totals]
    return means


def random_rouge_pairs(rng, count):
    """Multi-line texts over a small vocabulary: many repeated tokens, so the LCS tables have ties everywhere and
    the union LCS of ROUGE-Lsum depends on the backtracking order."""
    words = ["the", "The", "cat", "cats", "sat", "sits", "sitting", "on", "mat", "mats", "a", "dog", "runs",
             "running", "ran", ",", ".", "re-run", "2"]

    def text():
        lines = []
        for _ in range(rng.randint(0, 4)):
            lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(0, 10))))
        return "\n".join(lines)

    return [(text(), text()) for _ in range(count)]


def squad_case(prediction, references):
    class Example:
        qas_id = "q"
        answers = [{"text": r} for r in references]

    exact, f1 = get_raw_scores([Example()], {"q": prediction})
    return {
        "prediction": prediction,
        "references": references,
        "exact_match": float(exact["q"]),
        "f1": float(f1["q"]),
        "pairs": [{"reference": r, "exact_match": float(compute_exact(r, prediction)),
                   "f1": float(compute_f1(r, prediction))} for r in references],
    }


def code_points():
    return (c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)


def boundary_code_points():
    """Every code point where a property that normalize_answer depends on changes from its predecessor's (and that
    predecessor): lowercase offset, str.isalnum, str.isspace, and the two final-sigma contexts. Checking these
    and only these covers every range of the C++ tables at both ends."""
    def key(c):
        ch = chr(c)
        lowered = ch.lower()
        offset = ord(lowered) - c if len(lowered) == 1 else lowered
        return (offset, ch.isalnum(), ch.isspace(), ("A" + ch + "\u03a3").lower()[-1], (ch + "\u03a3").lower()[-1])

    picked, previous_key, previous = set(), None, None
    for c in code_points():
        k = key(c)
        if previous is not None and k != previous_key:
            picked.update((previous, c))
        previous_key, previous = k, c
    return sorted(picked)


def context_string(c):
    ch = chr(c)
    # The code point lowered, next to an article on either side, before and after capital sigma, alone.
    return f"{ch}\u03a3 A\u03a3{ch} A{ch}\u03a3 a{ch} {ch}a the{ch}the {ch}"


def random_unicode_strings(rng, count):
    pieces = ["a", "an", "the", "The", "A", " ", "  ", "\t", "\n", "\u00a0", "\u3000", "-", "'", ".", "_", "\u03a3",
              "\u0130", "\u212a", "\u0301", "\u00ad", "\u200b", "caf\u00e9", "NA\u00cfVE", "\u039f\u0394\u039f\u03a3"]

    def random_code_point():
        while True:
            c = rng.choice([rng.randint(0x20, 0x7E), rng.randint(0x80, 0x2FFF), rng.randint(0x3000, 0xFFFF),
                            rng.randint(0x10000, 0x10FFFF)])
            if not 0xD800 <= c <= 0xDFFF:
                return chr(c)

    return ["".join(rng.choice(pieces) if rng.random() < 0.5 else random_code_point()
                    for _ in range(rng.randint(0, 24))) for _ in range(count)]


INVALID_UTF8 = [
    b"caf\xe9 au lait",          # Latin-1, not UTF-8
    b"\xc3",                     # truncated two-byte sequence at the end
    b"na\xc3\xafve \xc3 the end",
    b"\xe2\x82 euro",            # truncated three-byte sequence
    b"\xed\xa0\x80 surrogate",   # encoded surrogate
    b"\xc0\xaf overlong slash",  # overlong encoding
    b"\xe0\x80\xaf overlong",
    b"\xf4\x90\x80\x80 past U+10FFFF",
    b"\xf0\x9f\x98 truncated emoji \xf0\x9f\x98\x80",
    b"\x80\xbf lone continuation bytes",
    b"\xff\xfe A the\xfe",
    b"The\xf8\x88\x80\x80\x80 five-byte form",
]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_eval_references.py OUT.json")
    rng = random.Random(SEED)

    fixture = read_jsonl("rouge_fixture.jsonl")
    rouge_cases = [rouge_case(p["prediction"], p["reference"]) for p in fixture]
    random_cases = [rouge_case(p, r) for p, r in random_rouge_pairs(rng, 300)]

    words = read_words("porter_words.txt")
    for case in rouge_cases:
        words += case["unstemmed"]["prediction_tokens"] + case["unstemmed"]["reference_tokens"]
    words = list(dict.fromkeys(words))  # first occurrence order, no repeats
    stemmer = PorterStemmer()
    stems = [[w, stemmer.stem(w)] for w in words]

    squad_cases = [squad_case(c["prediction"], c["references"]) for c in read_jsonl("squad_fixture.jsonl")]
    squad_mean = {"exact_match": 0.0, "f1": 0.0}
    for case in squad_cases:
        squad_mean["exact_match"] += case["exact_match"]
        squad_mean["f1"] += case["f1"]
    squad_mean = {k: v / len(squad_cases) for k, v in squad_mean.items()}

    texts = [c["prediction"] for c in fixture] + [c["reference"] for c in fixture]
    for c in squad_cases:
        texts += [c["prediction"]] + c["references"]
    texts += random_unicode_strings(rng, 600)
    texts += [context_string(c) for c in boundary_code_points()]
    normalized = [[t, normalize_answer(t)] for t in texts]

    invalid = []
    for raw in INVALID_UTF8:
        decoded = raw.decode("utf-8", "replace")
        invalid.append({"hex": raw.hex(), "normalized": normalize_answer(decoded),
                        "tokens": tokenize.tokenize(decoded, PorterStemmer())})

    versions = {name: importlib.metadata.version(name) for name in ("rouge-score", "nltk", "transformers")}
    versions["python"] = platform.python_version()
    versions["unicode"] = unicodedata.unidata_version
    out = {
        "format_version": FORMAT_VERSION,
        "versions": versions,
        "rouge": rouge_cases,
        "rouge_mean": {"stemmed": mean_scores(rouge_cases, "stemmed"),
                       "unstemmed": mean_scores(rouge_cases, "unstemmed")},
        "rouge_random": random_cases,
        "stems": stems,
        "squad": squad_cases,
        "squad_mean": squad_mean,
        "normalize": normalized,
        "invalid_utf8": invalid,
    }
    os.makedirs(os.path.dirname(os.path.abspath(sys.argv[1])), exist_ok=True)
    tmp = sys.argv[1] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
    os.replace(tmp, sys.argv[1])
    print(f"{len(rouge_cases)} ROUGE pairs, {len(random_cases)} random ROUGE pairs, {len(stems)} words, "
          f"{len(squad_cases)} SQuAD cases, {len(normalized)} normalisations, {len(invalid)} invalid UTF-8 texts "
          f"-> {sys.argv[1]}")


if __name__ == "__main__":
    main()
