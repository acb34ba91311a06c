"""data_prep/manpages/make_corpus.py on .deb files written here (ar archives with a data.tar.xz, as dpkg-deb builds
them) that hold pages in the shapes man-pages uses: font requests and escapes, a table, comments, an escaped blank
inside a request's argument, a page that includes another (.so), a symbolic link, a DESCRIPTION too short, a NAME
line without a summary, a man3type page, and a doc folder that links to another package's (manpages-dev's).
Checks the records word for word, the manifest, that a second run writes the same bytes, the sample of --max-pages
and the errors for a missing .deb and bad options.
  test_manpages_corpus.py MAKE_CORPUS_PY WORK_DIR
"""

import gzip
import io
import json
import lzma
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

MAKE_CORPUS, WORK = Path(sys.argv[1]), Path(sys.argv[2])

OPEN_2 = r""".\" Copyright (C) 1992 Drew Eckhardt
.TH open 2 2023-02-05 "Linux man-pages 6.03"
.SH NAME
open, openat, creat \- open and possibly create a file
.SH SYNOPSIS
.nf
.B #include <fcntl.h>
.BI "int open(const char *" pathname ", int " flags );
.fi
.SH DESCRIPTION
The
.BR open ()
system call opens the file specified by
.IR pathname .
If the specified file does not exist, it may optionally (if
.B O_CREAT
is specified in
.IR flags )
be created by
.BR open ()\(emsee
.BR creat (2).
.PP
.TS
l l.
O_RDONLY	read only
.TE
.\" a comment that is not text
The arguments
.RI ( pathname ,\  flags )
name the file; \fBO_CLOEXEC\fP sets the \fIclose\-on\-exec\fR flag.
.SH RETURN VALUE
A file descriptor.
"""

SHORT_7 = """.TH short 7
.SH NAME
short \\- a page with little to say
.SH DESCRIPTION
Only five words are here.
"""

NO_SUMMARY_3 = """.TH nosummary 3
.SH NAME
nosummary
.SH DESCRIPTION
""" + "word " * 30 + "\n"

TYPE_3 = """.TH size_t 3type
.SH NAME
size_t, ssize_t \\- count of bytes
.SH DESCRIPTION
""" + "Used for a count of bytes or an index into an array of objects; " * 3 + "\n"

COPYRIGHT = """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/

Files: *
License: GPL-2+

Files: man3/*
License: BSD-3-clause
"""


def add(tar, name, data=None, link=None):
    info = tarfile.TarInfo(name)
    info.mtime = 0
    if link is not None:
        info.type, info.linkname = tarfile.SYMTYPE, link
        tar.addfile(info)
    elif data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def write_deb(path, entries):
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for entry in entries:
            add(tar, *entry)
    members = [(b"debian-binary", b"2.0\n"), (b"control.tar.xz", lzma.compress(b"")),
               (b"data.tar.xz", lzma.compress(data.getvalue()))]
    out = bytearray(b"!<arch>\n")
    for name, body in members:
        out += name.ljust(16) + b"0".ljust(12) + b"0".ljust(6) + b"0".ljust(6) + b"100644".ljust(8) + \
            str(len(body)).encode().ljust(10) + b"`\n" + body + (b"\n" if len(body) % 2 else b"")
    path.write_bytes(bytes(out))


def page(text):
    return gzip.compress(text.encode(), mtime=0)


def make(out, *args, debs=None):
    return subprocess.run([sys.executable, str(MAKE_CORPUS), "--out", str(out), "--debs", str(debs or WORK / "debs"),
                           *args], capture_output=True, text=True)


if WORK.exists():
    shutil.rmtree(WORK)
(WORK / "debs").mkdir(parents=True)
write_deb(WORK / "debs" / "manpages_6.03-2_all.deb", [
    ("./usr/share/doc/manpages", None), ("./usr/share/doc/manpages/copyright", COPYRIGHT.encode()),
    ("./usr/share/man/man7/short.7.gz", page(SHORT_7)),
])
write_deb(WORK / "debs" / "manpages-dev_6.03-2_all.deb", [
    ("./usr/share/doc/manpages-dev", None, "manpages"),
    ("./usr/share/man/man2/open.2.gz", page(OPEN_2)),
    ("./usr/share/man/man2/creat.2.gz", None, "open.2.gz"),
    ("./usr/share/man/man3/openat2.3.gz", page(".so man2/open.2\n")),
    ("./usr/share/man/man3/nosummary.3.gz", page(NO_SUMMARY_3)),
    ("./usr/share/man/man3type/size_t.3type.gz", page(TYPE_3)),
])

done = make(WORK / "corpus")
assert done.returncode == 0, done.stderr
records = [json.loads(line) for line in (WORK / "corpus" / "corpus.jsonl").read_text().splitlines()]
assert [r["id"] for r in records] == ["man2/open.2", "man3/size_t.3type"], [r["id"] for r in records]
opened = records[0]
expected_document = (
    "The open() system call opens the file specified by pathname. If the specified file does not exist, it may "
    "optionally (if O_CREAT is specified in flags) be created by open()\u2014see creat(2). The arguments "
    "(pathname, flags) name the file; O_CLOEXEC sets the close-on-exec flag.")
assert opened == {"id": "man2/open.2", "package": "manpages-dev", "section": 2, "names": "open, openat, creat",
                  "summary": "open and possibly create a file", "document": expected_document}, opened
assert records[1]["section"] == 3 and records[1]["summary"] == "count of bytes", records[1]

manifest = json.loads((WORK / "corpus" / "MANIFEST.json").read_text())
assert manifest["pairs"] == 2 and manifest["pairs_per_section"] == {"2 (syscall)": 1, "3 (library)": 1}, manifest
assert manifest["left_out"] == {"DESCRIPTION under 20 words": 1, "includes another page (.so)": 1,
                                "no 'names - summary' NAME line": 1, "symbolic link to another page": 1}, manifest
by_package = {p["package"]: p for p in manifest["packages"]}
assert by_package["manpages"]["licences"] == ["BSD-3-clause", "GPL-2+"], by_package
assert by_package["manpages-dev"]["licences"] == ["BSD-3-clause", "GPL-2+"], by_package  # via the doc link
assert by_package["manpages-dev"]["pages"] == 4 and by_package["manpages-dev"]["version"] == "6.03-2"
assert len(by_package["manpages"]["deb_sha256"]) == 64
document_words = sorted(len(r["document"].split()) for r in records)
assert document_words == [42, 43], document_words
assert manifest["document_words"] == {"min": 42, "q1": 42.25, "median": 42.5, "q3": 42.75, "max": 43, "mean": 42.5}, \
    manifest["document_words"]
assert manifest["summary_words"]["min"] == 3 and manifest["summary_words"]["max"] == 6, manifest

# The same .deb files, the same bytes.
again = make(WORK / "again")
assert again.returncode == 0, again.stderr
assert (WORK / "again" / "corpus.jsonl").read_bytes() == (WORK / "corpus" / "corpus.jsonl").read_bytes()
assert json.loads((WORK / "again" / "MANIFEST.json").read_text())["corpus_sha256"] == manifest["corpus_sha256"]

# --max-document-words cuts the document; --max-pages samples.
cut = make(WORK / "cut", "--max-document-words", "25", "--max-pages", "1")
assert cut.returncode == 0, cut.stderr
cut_records = [json.loads(line) for line in (WORK / "cut" / "corpus.jsonl").read_text().splitlines()]
assert len(cut_records) == 1 and cut_records[0]["document"] == " ".join(expected_document.split()[:25]), cut_records

# Errors name what is wrong.
(WORK / "only").mkdir()
shutil.copy(WORK / "debs" / "manpages_6.03-2_all.deb", WORK / "only")
missing = make(WORK / "x", debs=WORK / "only")
assert missing.returncode == 2 and "manpages-dev_6.03-2_all.deb: not found" in missing.stderr, missing.stderr
(WORK / "broken").mkdir()
shutil.copy(WORK / "debs" / "manpages_6.03-2_all.deb", WORK / "broken")
(WORK / "broken" / "manpages-dev_6.03-2_all.deb").write_text("not a deb")
broken = make(WORK / "x", debs=WORK / "broken")
assert broken.returncode == 2 and "manpages-dev_6.03-2_all.deb: not a readable .deb" in broken.stderr, broken.stderr
bad = make(WORK / "x", "--max-document-words", "5")
assert bad.returncode == 2 and "--min-document-words 20 and --max-document-words 5" in bad.stderr, bad.stderr
print("ok: 2 pages of 6 made into records, 4 left out by reason; the same bytes twice; sampling and errors")
