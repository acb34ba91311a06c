"""Writes src/eval/unicode_tables.cpp: the character properties that Python's str methods use in the metrics that
t5scale reproduces (rouge-score's tokenizer, the SQuAD answer normalisation).

The tables are taken from the running Python's own behaviour, so that the C++ code lowercases, finds word
boundaries and splits on whitespace exactly as that Python does. Run it with the reference Python (the project's
venv) whenever that Python's Unicode version changes:

    python src/eval/make_unicode_tables.py src/eval/unicode_tables.cpp
"""
import sys
import unicodedata

MAX_CODE_POINT = 0x10FFFF
SIGMA = "\u03a3"
FINAL_SIGMA = "\u03c2"


def code_points():
    # Surrogates cannot occur in decoded UTF-8, so their properties never matter.
    return (c for c in range(MAX_CODE_POINT + 1) if not 0xD800 <= c <= 0xDFFF)


def ranges(predicate):
    out, start, previous = [], None, None
    for c in code_points():
        if predicate(chr(c)):
            if start is None or c != previous + 1:
                if start is not None:
                    out.append((start, previous))
                start = c
            previous = c
    if start is not None:
        out.append((start, previous))
    return out


def lower_runs():
    """Single code point lowercase mappings as runs (first, last, stride, delta): every stride-th code point from
    first to last maps to itself + delta. Upper/lower pairs that alternate (stride 2) make most runs short."""
    runs = []
    for c in code_points():
        lowered = chr(c).lower()
        if len(lowered) != 1 or lowered == chr(c):
            continue
        delta = ord(lowered) - c
        if runs:
            first, last, stride, run_delta = runs[-1]
            gap = c - last
            if run_delta == delta and gap in (1, 2) and stride in (0, gap):
                runs[-1] = [first, c, gap, delta]
                continue
        runs.append([c, c, 0, delta])
    return [(first, last, stride or 1, delta) for first, last, stride, delta in runs]


# Python lowercases U+03A3 to final sigma when a cased letter precedes it (skipping case-ignorable characters) and
# none follows. Probing that rule tells the two properties apart without a copy of DerivedCoreProperties.txt:
# "A" c "Σ" ends in final sigma when c is case-ignorable (skipped back to the cased "A") or cased; c "Σ" only when
# c is cased and not case-ignorable.
def final_after(text):
    return text.lower()[-1] == FINAL_SIGMA


def is_case_ignorable(ch):
    return final_after("A" + ch + SIGMA) and not final_after(ch + SIGMA)


def is_cased_not_ignorable(ch):
    return final_after(ch + SIGMA)


def format_table(element_type, name, cells, per_row):
    """A C++ array of `element_type` named `name` holding `cells` (their C++ initialisers), `per_row` to a line,
    and its size."""
    lines = [f"const {element_type} {name}[] = {{"]
    for start in range(0, len(cells), per_row):
        lines.append("    " + ", ".join(cells[start:start + per_row]) + ",")
    lines.append("};")
    lines.append(f"const std::size_t {name}_size = sizeof({name}) / sizeof({name}[0]);")
    return "\n".join(lines)


def format_pairs(name, pairs):
    return format_table("CodePointRange", name, [f"{{0x{first:X}, 0x{last:X}}}" for first, last in pairs], 5)


def format_runs(name, runs):
    cells = [f"{{0x{first:X}, 0x{last:X}, {stride}, {delta}}}" for first, last, stride, delta in runs]
    return format_table("LowerRun", name, cells, 4)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_unicode_tables.py OUTPUT.cpp")
    multi = {c: chr(c).lower() for c in code_points() if len(chr(c).lower()) != 1}
    # unicode_text.cpp handles the one multi-character lowercase mapping itself; refuse a Python with others.
    if multi != {0x130: "i\u0307"}:
        sys.exit(f"unexpected multi-character lowercase mappings: {multi!r}")
    parts = [
        "// Character properties of Python " + sys.version.split()[0] + " (Unicode " + unicodedata.unidata_version +
        "), written by src/eval/make_unicode_tables.py;",
        "// regenerate with the reference Python instead of editing. Ranges are sorted and disjoint.",
        '#include "eval/unicode_tables.h"',
        "",
        "namespace t5scale::unicode_tables {",
        "",
        "const char kUnicodeVersion[] = \"" + unicodedata.unidata_version + "\";",
        "",
        "// str.lower() for one code point, except U+0130 (two code points) and the final-sigma context.",
        format_runs("kLowerRuns", lower_runs()),
        "",
        "// str.isalnum(): the word characters of re's \\b (with '_').",
        format_pairs("kAlnumRanges", ranges(str.isalnum)),
        "",
        "// str.isspace(): what str.split() splits on.",
        format_pairs("kSpaceRanges", ranges(str.isspace)),
        "",
        "// Case_Ignorable, as str.lower()'s final-sigma rule sees it.",
        format_pairs("kCaseIgnorableRanges", ranges(is_case_ignorable)),
        "",
        "// Cased and not Case_Ignorable (characters that are both are skipped before casedness is asked).",
        format_pairs("kCasedRanges", ranges(is_cased_not_ignorable)),
        "",
        "}  // namespace t5scale::unicode_tables",
        "",
    ]
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        out.write("\n".join(parts))


if __name__ == "__main__":
    main()
