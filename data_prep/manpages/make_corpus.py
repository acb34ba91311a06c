#!/usr/bin/env python3
"""Real text for the studies, made without the internet: the Linux man-pages project's manual pages as Debian 12
packages them (manpages and manpages-dev 6.03-2, from Debian's archive or a folder of their .deb files).

Each page is one record of corpus.jsonl:
  {"id": "man2/open.2", "package": "manpages-dev", "section": 2, "names": "open, openat, creat",
   "summary": "open and possibly create a file", "document": "The open() system call opens the file ..."}
- summary: the description of the NAME line (after "\\-"), what the page's authors wrote as its one-line summary;
- document: the DESCRIPTION section as plain text (roff requests and escapes removed), its first
  --max-document-words words;
- section: the manual section, 1 to 8 (man3type, man3const, ... count as 3), a class for the classification task.
Pages that only include another (".so man3/x.3"), symbolic links and pages without a NAME line or a DESCRIPTION of at
least --min-document-words words are left out and counted by reason.

Beside it, MANIFEST.json: each package's version, .deb file and SHA-256, the licences its copyright file names, the
count of pairs per section, the words of documents and summaries (min, quartiles, max), what was left out and the
SHA-256 of corpus.jsonl. The same .deb files give the same corpus byte for byte.

  make_corpus.py --out data/manpages                    # apt-get download of the pinned versions, into --debs
  make_corpus.py --out data/manpages --debs DIR          # the .deb files already in DIR
  make_corpus.py --out sample --max-pages 300            # every n-th page: a sample of about 300 (tests)

Then t5scale-prep with data_prep/recipes/manpages_summary.yaml (summary from document) or manpages_section.yaml
(the section from the page's text).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import lzma
import os
import re
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

# The packages and versions of Debian 12 (bookworm); another version makes another corpus and is refused.
PACKAGES = {"manpages": "6.03-2", "manpages-dev": "6.03-2"}
SECTION_NAMES = {1: "command", 2: "syscall", 3: "library", 4: "device", 5: "format", 6: "game", 7: "overview",
                 8: "admin"}


def fail(message: str) -> None:
    print(f"make_corpus.py: error: {message}", file=sys.stderr)
    sys.exit(2)


# ---- .deb files ------------------------------------------------------------------------------------------------

def deb_name(package: str, version: str) -> str:
    return f"{package}_{version.replace(':', '%3a')}_all.deb"


def fetch_debs(debs: Path) -> None:
    """apt-get download of the pinned versions into `debs`, for those not there yet."""
    wanted = [f"{p}={v}" for p, v in PACKAGES.items() if not (debs / deb_name(p, v)).is_file()]
    if not wanted:
        return
    debs.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["apt-get", "download", *wanted], cwd=debs, capture_output=True, text=True)
    if done.returncode != 0:
        fail(f"apt-get download {' '.join(wanted)} (into {debs}) failed: {done.stderr.strip()}; "
             "put the .deb files there by hand and give --debs")


def ar_members(data: bytes) -> dict:
    """The members of an ar archive (a .deb) by name."""
    if not data.startswith(b"!<arch>\n"):
        raise ValueError("not an ar archive")
    members, at = {}, 8
    while at + 60 <= len(data):
        header = data[at:at + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        members[name] = data[at + 60:at + 60 + size]
        at += 60 + size + (size % 2)
    return members


def deb_files(path: Path, deb: bytes) -> tarfile.TarFile:
    """The data archive of the .deb `deb` read from `path` (data.tar.xz, .gz or uncompressed), opened for reading."""
    members = ar_members(deb)
    for name, member in members.items():
        if name.startswith("data.tar"):
            if name.endswith(".xz"):
                member = lzma.decompress(member)
            elif name.endswith(".gz"):
                member = gzip.decompress(member)
            elif name != "data.tar":
                raise ValueError(f"{path}: {name}: compression not supported")
            return tarfile.open(fileobj=io.BytesIO(member))
    raise ValueError(f"{path}: no data.tar member")


# ---- roff to text ----------------------------------------------------------------------------------------------

NAMED_CHARACTERS = {"em": "\u2014", "en": "\u2013", "aq": "'", "dq": '"', "lq": '"', "rq": '"', "oq": "'",
                    "cq": "'", "bu": "\u2022", "co": "\u00a9", "rg": "\u00ae", "tm": "\u2122", "mu": "\u00d7",
                    "->": "\u2192", "<-": "\u2190", "<=": "\u2264", ">=": "\u2265", "!=": "\u2260", "ti": "~",
                    "ha": "^", "rs": "\\", "lB": "[", "rB": "]", "lC": "{", "rC": "}", "ga": "`", "hy": "-",
                    "mi": "-", "pl": "+", "eq": "=", "sl": "/", "ba": "|", "dg": "\u2020", "de": "\u00b0",
                    "+-": "\u00b1", "**": "*", "pc": "\u00b7"}
ESCAPE = re.compile(r"\\(\((..)|\[([^\]]*)\]|\*(\(..|\[[^\]]*\]|.)|f(\(..|\[[^\]]*\]|.)|s[-+]?\d|"
                    r"[kvhwoxXlLbDNZ]'[^']*'|n(\(..|\[[^\]]*\]|.)|.)")


def _escape(match: re.Match) -> str:
    whole = match.group(1)
    if match.group(2) is not None:
        return NAMED_CHARACTERS.get(match.group(2), "")
    if match.group(3) is not None:
        name = match.group(3)
        if name.startswith("u") and re.fullmatch(r"u[0-9A-Fa-f]{4,6}", name):
            return chr(int(name[1:], 16))
        return NAMED_CHARACTERS.get(name, "")
    if match.group(4) is not None:  # strings: \*(lq, \*(rq, \*R ...
        return {"(lq": '"', "(rq": '"', "[lq]": '"', "[rq]": '"', "R": "\u00ae", "(Tm": "\u2122"}.get(match.group(4), "")
    if match.group(5) is not None or match.group(6) is not None:  # fonts, registers
        return ""
    if whole[0] in "sklvhwoxXLbDNZ":
        return ""
    return {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " ", "&": "", "|": "", "^": "", "%": "",
            "c": "", ":": "", "/": "", ",": "", "'": "'", "`": "`", ".": ".", "t": " ", "(": ""}.get(whole, "")


def plain(text: str) -> str:
    return ESCAPE.sub(_escape, text)


def request_arguments(rest: str) -> list:
    """A request's arguments: words separated by blanks, "double quoted" ones kept whole ("" is one ")."""
    args, at = [], 0
    while at < len(rest):
        if rest[at] in " \t":
            at += 1
        elif rest[at] == '"':
            end, word = at + 1, []
            while end < len(rest):
                if rest[end] == '"':
                    if rest[end + 1:end + 2] == '"':
                        word.append('"')
                        end += 2
                        continue
                    break
                word.append(rest[end])
                end += 1
            args.append("".join(word))
            at = end + 1
        else:
            end = at
            while end < len(rest) and rest[end] not in " \t":
                end += 2 if rest[end] == "\\" else 1  # an escaped blank ("\ ") stays in the word
            args.append(rest[at:end])
            at = end
    return args


FONT_REQUESTS = {"B", "I", "SM", "SB", "BR", "RB", "IR", "RI", "BI", "IB", "CW"}


def sections(source: str) -> dict:
    """{section title: [text lines]} of a man(7) page, tables (tbl) and comments left out."""
    found, current, in_table = {}, None, False
    for raw in source.split("\n"):
        line = raw.rstrip()
        if in_table:
            in_table = not line.startswith(".TE")
            continue
        if line.startswith(('.\\"', "'\\\"", '\\"')) or line in (".", "'"):  # comments, empty requests
            continue
        if line.startswith(".TS"):
            in_table = True
            continue
        if line.startswith((".", "'")):
            name, _, rest = line[1:].lstrip().partition(" ")
            if name == "SH":
                current = plain(" ".join(request_arguments(rest))).strip().upper()
                found.setdefault(current, [])
                continue
            if current is None:
                continue
            args = request_arguments(rest)
            if name in FONT_REQUESTS:
                # alternating fonts join their arguments without a space; B and I take the rest of the line
                text = ("".join(args) if len(name) == 2 and name not in ("SM", "SB", "CW") else " ".join(args))
                found[current].append(plain(text))
            elif name in ("SS", "IP", "TQ", "UR", "MT") and args:
                found[current].append(plain(args[0]) if name != "SS" else plain(" ".join(args)))
            continue  # other requests and macros (paragraphs, indents, fill modes) carry no running text
        if current is not None:
            found[current].append(plain(line))
    return found


def words_of(lines: list) -> list:
    return " ".join(lines).split()


# ---- the corpus ------------------------------------------------------------------------------------------------

def copyright_licences(files: tarfile.TarFile, package: str, earlier: dict) -> list:
    """The licence names of the package's copyright file; a package whose doc folder links to another's (as
    manpages-dev's to manpages) has that package's, from `earlier`."""
    try:
        doc = files.getmember(f"./usr/share/doc/{package}")
        if doc.issym():
            return earlier.get(doc.linkname, [])
        text = files.extractfile(f"./usr/share/doc/{package}/copyright").read().decode("utf-8", "replace")
    except KeyError:
        return []
    return sorted({m.strip() for m in re.findall(r"^License:\s*(.+)$", text, re.M)})


def page_record(path: str, package: str, source: str, min_words: int, max_words: int):
    """(record, None) or (None, reason left out)."""
    if re.match(r"\.so\s", source.lstrip()):
        return None, "includes another page (.so)"
    found = sections(source)
    name_words = words_of(found.get("NAME", []))
    name_line = " ".join(name_words)
    if " - " not in name_line:
        return None, "no 'names - summary' NAME line"
    names, summary = (part.strip() for part in name_line.split(" - ", 1))
    document = words_of(found.get("DESCRIPTION", []))
    if len(document) < min_words:
        return None, f"DESCRIPTION under {min_words} words"
    if not summary:
        return None, "empty summary"
    match = re.search(r"/man(\d)[a-z]*/([^/]+)$", path)
    return {"id": f"man{match.group(1)}/{match.group(2).removesuffix('.gz')}", "package": package,
            "section": int(match.group(1)), "names": names, "summary": summary,
            "document": " ".join(document[:max_words])}, None


def quartiles(values: list) -> dict:
    if not values:
        return {}
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return {"min": min(values), "q1": q[0], "median": q[1], "q3": q[2], "max": max(values),
            "mean": round(statistics.fmean(values), 1)}


def make(debs: Path, out: Path, min_words: int, max_words: int, max_pages: int) -> dict:
    records, left_out, packages = [], {}, []
    for package, version in PACKAGES.items():
        path = debs / deb_name(package, version)
        if not path.is_file():
            fail(f"{path}: not found (give --debs the folder of {', '.join(deb_name(p, v) for p, v in PACKAGES.items())})")
        try:
            deb = path.read_bytes()
            files = deb_files(path, deb)
        except (ValueError, tarfile.TarError, lzma.LZMAError) as e:
            fail(f"{path}: not a readable .deb: {e}")
        pages = sorted((m for m in files.getmembers()
                        if m.isfile() and re.match(r"\./usr/share/man/man\d[a-z]*/[^/]+\.gz$", m.name)),
                       key=lambda m: m.name)
        links = sum(1 for m in files.getmembers() if m.issym() and "/share/man/man" in m.name)
        if links:
            left_out["symbolic link to another page"] = left_out.get("symbolic link to another page", 0) + links
        for member in pages:
            source = gzip.decompress(files.extractfile(member).read()).decode("utf-8", "replace")
            record, reason = page_record(member.name, package, source, min_words, max_words)
            if record is None:
                left_out[reason] = left_out.get(reason, 0) + 1
            else:
                records.append(record)
        packages.append({"package": package, "version": version, "deb": path.name,
                         "deb_sha256": hashlib.sha256(deb).hexdigest(),
                         "licences": copyright_licences(files, package, {p["package"]: p["licences"] for p in packages}),
                         "pages": len(pages)})
    records.sort(key=lambda r: r["id"])
    if max_pages and len(records) > max_pages:  # every n-th page: all sections keep their share
        step = len(records) / max_pages
        records = [records[int(i * step)] for i in range(max_pages)]
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus.jsonl"
    with open(corpus, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
    per_section = {}
    for r in records:
        per_section[r["section"]] = per_section.get(r["section"], 0) + 1
    manifest = {
        "corpus": corpus.name,
        "corpus_sha256": hashlib.sha256(corpus.read_bytes()).hexdigest(),
        "made_by": "data_prep/manpages/make_corpus.py",
        "options": {"min_document_words": min_words, "max_document_words": max_words, "max_pages": max_pages},
        "packages": packages,
        "pairs": len(records),
        "pairs_per_section": {f"{s} ({SECTION_NAMES.get(s, 'other')})": n for s, n in sorted(per_section.items())},
        "document_words": quartiles([len(r["document"].split()) for r in records]),
        "summary_words": quartiles([len(r["summary"].split()) for r in records]),
        "left_out": dict(sorted(left_out.items())),
        "licence_note": "The pages keep their authors' licences (each package's usr/share/doc/<package>/copyright, "
                        "listed here by name); the corpus is for training and evaluation runs, not for "
                        "redistribution as a work of its own.",
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return manifest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for corpus.jsonl and MANIFEST.json")
    parser.add_argument("--debs", type=Path, default=None,
                        help="folder of the .deb files (default ~/.cache/t5scale/debs, filled by apt-get download)")
    parser.add_argument("--min-document-words", type=int, default=20)
    parser.add_argument("--max-document-words", type=int, default=400,
                        help="the document's first words (a model reads its first max_source_length tokens)")
    parser.add_argument("--max-pages", type=int, default=0, help="a sample of this many pages (0: all)")
    args = parser.parse_args(argv)
    if args.min_document_words < 1 or args.max_document_words < args.min_document_words:
        fail(f"--min-document-words {args.min_document_words} and --max-document-words {args.max_document_words}: "
             "need 1 <= min <= max")
    if args.max_pages < 0:
        fail(f"--max-pages must be at least 0, got {args.max_pages}")
    debs = args.debs
    if debs is None:
        debs = Path(os.environ.get("T5SCALE_CACHE", Path.home() / ".cache" / "t5scale")) / "debs"
        fetch_debs(debs)
    manifest = make(debs, args.out, args.min_document_words, args.max_document_words, args.max_pages)
    print(f"{manifest['pairs']} pairs in {args.out / manifest['corpus']} (sha256 {manifest['corpus_sha256'][:16]}...); "
          f"per section: {manifest['pairs_per_section']}; left out: {manifest['left_out']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
