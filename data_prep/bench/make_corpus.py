"""Writes a JSONL corpus shaped like a real summarisation dataset, for t5scale-prep's benchmark.

usage: make_corpus.py {cnn|samsum} OUT.jsonl [--mb 200] [--seed 0]

cnn:    CNN/DailyMail 3.0.0 fields (id, article, highlights): articles of 25-45 sentences (~780 words, with a
        long tail), highlights of 3-4 sentences joined by "\n" (~56 words); data_prep/recipes/cnn_dailymail.yaml.
samsum: SAMSum fields (id, dialogue, summary): 3-30 turns "Name: text" joined by "\r\n" (~94 words), summaries
        of 1-3 sentences (~20 words); data_prep/recipes/samsum.yaml.

Words follow a Zipf law over a vocabulary of English function words and generated content words (with
capitals, names, numbers, punctuation and a few non-ASCII characters), so that a SentencePiece model trained on
it has the piece lengths of real English text. Deterministic for a seed.
"""
import argparse
import hashlib
import json
import random
import sys

FUNCTION_WORDS = (
    "the of and to a in is that for it as was with be by on not he i this are or his from at which but have an "
    "they you were her she there been one all we their has would when if so no will more can what about up out "
    "who them some could into its than then other time only new also after two first over said years like just "
    "people because most before through back where much should well even those made many any very our how between "
    "while last being under during same both each another against three still since four might own going told "
    "says according police government officials week year day told news report percent million").split()
NAMES = ("Amanda Jerry Tom Hannah Betty Kevin Lucas Maria Olivia Ethan Sophie Daniel Chloe Ryan Emma Jack Laura "
         "Mark Ella Adam Zoe Oliver Mia Noah Paul Anna Chris Kate Sam Lily").split()
PLACES = "London Paris Washington Berlin Moscow Sydney Tokyo Chicago Madrid Rome Beijing Toronto Dubai".split()
ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr", "pr",
          "br", "cr", "ch", "sh", "th", "pl", "gr", "sp", "fl", ""]
VOWELS = ["a", "e", "i", "o", "u", "ea", "ou", "ai", "io", "ie", "ee", "oo"]
CODAS = ["", "n", "r", "s", "t", "l", "m", "nd", "nt", "st", "ng", "ck", "rt", "ss", "ll", "ct"]
SUFFIXES = ["", "", "", "s", "ed", "ing", "er", "ly", "tion", "ment", "ness", "al", "ive", "able"]
EXTRA = ["caf\u00e9", "na\u00efve", "\u00a320m", "\u20ac5", "r\u00e9sum\u00e9", "Z\u00fcrich", "S\u00e3o"]


class Words:
    def __init__(self, rng, size=30000):
        self.rng = rng
        content = set()
        while len(content) < size:
            syllables = rng.choice([1, 1, 1, 2, 2, 2, 3])
            word = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(syllables))
            content.add(word + rng.choice(SUFFIXES))
        # Shorter words are the more frequent ones, as in English.
        self.vocabulary = FUNCTION_WORDS + sorted(sorted(content), key=lambda w: (len(w), rng.random()))
        # Zipf weights: rank r has weight 1 / r^1.05; cumulative for bisect sampling.
        weights = [1.0 / (r + 1) ** 1.05 for r in range(len(self.vocabulary))]
        total = sum(weights)
        self.cumulative = []
        running = 0.0
        for w in weights:
            running += w / total
            self.cumulative.append(running)

    def word(self):
        r = self.rng.random()
        lo, hi = 0, len(self.cumulative) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self.cumulative[mid] < r:
                lo = mid + 1
            else:
                hi = mid
        return self.vocabulary[lo]

    def sentence(self, mean_words):
        n = max(3, int(self.rng.gauss(mean_words, mean_words / 3)))
        out = []
        for i in range(n):
            x = self.rng.random()
            if x < 0.03:
                w = self.rng.choice(NAMES)
            elif x < 0.04:
                w = self.rng.choice(PLACES)
            elif x < 0.055:
                w = str(self.rng.choice([self.rng.randint(1, 100), self.rng.randint(1900, 2024),
                                         self.rng.randint(100, 99999)]))
            elif x < 0.057:
                w = self.rng.choice(EXTRA)
            else:
                w = self.word()
            if i == 0:
                w = w[:1].upper() + w[1:]
            out.append(w)
            if i < n - 1 and self.rng.random() < 0.07:
                out[-1] += ","
        text = " ".join(out)
        if self.rng.random() < 0.08:
            text = '"' + text + '"'
        return text + self.rng.choice([".", ".", ".", ".", "!", "?"])


def cnn_record(words, rng, index):
    sentences = int(min(120, max(6, rng.lognormvariate(3.45, 0.45))))  # median ~31 sentences of ~25 words
    article = " ".join(words.sentence(25) for _ in range(sentences))
    place = rng.choice(PLACES)
    article = f"{place.upper()} (CNN) -- " + article
    highlights = "\n".join(words.sentence(14) for _ in range(rng.choice([3, 3, 4, 4])))
    return {"article": article, "highlights": highlights,
            "id": hashlib.sha1(f"cnn-{index}".encode()).hexdigest()}


def samsum_record(words, rng, index):
    people = rng.sample(NAMES, rng.choice([2, 2, 2, 3, 4]))
    turns = []
    for _ in range(int(min(30, max(3, rng.gauss(11, 6))))):
        speaker = rng.choice(people)
        utterance = " ".join(words.sentence(7) for _ in range(rng.choice([1, 1, 1, 2])))
        if rng.random() < 0.15:
            utterance = utterance.lower().rstrip(".!?")
        turns.append(f"{speaker}: {utterance}")
    summary = " ".join(words.sentence(11) for _ in range(rng.choice([1, 1, 2, 3])))
    return {"id": str(13818513 + index), "dialogue": "\r\n".join(turns), "summary": summary}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["cnn", "samsum"])
    parser.add_argument("out")
    parser.add_argument("--mb", type=float, default=200.0, help="size to write, in MB (10^6 bytes)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    words = Words(rng)
    make = cnn_record if args.kind == "cnn" else samsum_record
    target = int(args.mb * 1e6)
    written = records = 0
    with open(args.out, "w", encoding="utf-8") as out:
        while written < target:
            line = json.dumps(make(words, rng, records), ensure_ascii=False) + "\n"
            out.write(line)
            written += len(line.encode("utf-8"))
            records += 1
    print(f"{args.out}: {records} {args.kind} records, {written / 1e6:.1f} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
