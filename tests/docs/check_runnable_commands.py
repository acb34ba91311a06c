"""The documentation's commands, run as a new user would run them, and its links.

The documents: README.md, the README.md of every top folder and of the folders inside them (jobs/quickstart/,
tests/<suite>/), and docs/*.md. Every fenced block of shell (bash, sh, shell) or Python in them must be marked on
the line before its fence:

    <!-- runnable -->                      run as written
    <!-- runnable; add to PROGRAM: ARGS; files: NAME ... -->
                                           run with ARGS appended to every call of PROGRAM (one of ours), to
                                           shorten it, with the named stand-in files made first (FILES below)
    <!-- not runnable: REASON -->          what the test machine lacks (a GPU, a Slurm cluster, a download)

The runnable blocks of one file run in order in one bash session, in a scratch folder laid out as the clone (the
source folders linked, results/ copied, build/bin holding our programs), with build/bin on PATH, HOME in the
scratch folder (~/.cache/t5scale/venv-path naming the project's Python environment) and Open MPI set up as the tests
set it (root allowed, oversubscribed, shared memory). A Python block runs in the project's Python. A command that
exits non-zero is reported with its file, line and text, and the tail of what it printed.

Every marked block, runnable or not, and every command of ours quoted in the text (`t5scale-prep --help`) is also
read: each option given to one of our programs must be one its --help lists, each `--set KEY=...` of t5scale-train
a key of its config reference, and no line may continue with a backslash followed by blanks or a comment (which
ends the command there). The --help texts are asked once for the entries that share a --work folder, and kept
there while the programs are unchanged (shared_program_help).

Every relative link of the documents ([text](path), [text](path#heading)) must name a file or folder that exists,
and a #heading one of the headings of the Markdown file it names.

The session runs as on a machine without network and without a Hugging Face cache: HF_HUB_CACHE, HF_HOME and
XDG_CACHE_HOME are unset (so the cache is ~/.cache/huggingface/hub in the scratch HOME) and HF_HUB_OFFLINE=1. A
stand-in named by a path under ~/ (files: ~/.cache/huggingface/hub/models--t5-small) is made in that HOME.

usage: check_runnable_commands.py --source DIR --build DIR --python PY --work DIR [--file README.md ...]
                                  [--except README.md ...] [--list]
"""
import argparse
import difflib
import fcntl
import glob
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import textwrap

# Our programs: the five of build/bin and the analysis command.
BUILD_PROGRAMS = ["t5scale-train", "t5scale-prep", "t5scale-study", "t5scale-ckpt", "t5scale-bench"]
PROGRAMS = BUILD_PROGRAMS + ["t5scale-analyze"]
# Programs whose first word may name a subcommand with options of its own (`t5scale-analyze watch --help`).
SUBCOMMANDS = {"t5scale-analyze": ("watch", "tensorboard")}
SHELL_INFO = {"bash", "sh", "shell"}
PYTHON_INFO = {"python", "python3"}
MARKER = re.compile(r"^\s*<!--\s*(not runnable|runnable)\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([^\s`]*)")
# The source folders a command may read, linked into the scratch folder (never written through: the folders that
# commands write, results/ and slurm/, are the scratch folder's own).
LINKED = ["CMakeLists.txt", "cmake", "src", "tests", "jobs", "data_prep", "analysis", "bench", "scripts"]
# Files whose blocks are not yet required to carry a marker (their marked blocks run all the same).
MARKERS_NOT_REQUIRED = set()
PER_FILE_TIMEOUT_S = 240


class Block:
    """A fenced block: its file, the line of its fence (1-based), info string, lines and marker: None,
    ("runnable", {"add": {program: arguments}, "files": [names]}) or ("not", reason)."""

    def __init__(self, path, line, info, lines, marker):
        self.path, self.line, self.info, self.lines, self.marker = path, line, info, lines, marker

    @property
    def runnable(self):
        return self.marker is not None and self.marker[0] == "runnable"

    def where(self, offset=0):
        return f"{self.path}:{self.line + 1 + offset}"


def doc_files(source):
    """README.md, the READMEs of the top folders and of the folders inside them (build folders and links left out),
    and docs/*.md."""
    found = ["README.md"]

    def folders(parent):
        top = os.path.join(source, parent)
        for name in sorted(os.listdir(top)) if os.path.isdir(top) else []:
            folder = os.path.join(top, name)
            if name.startswith((".", "build")) or os.path.islink(folder) or not os.path.isdir(folder):
                continue
            yield os.path.join(parent, name) if parent else name

    for top in folders(""):
        for folder in [top] + list(folders(top)):
            if os.path.isfile(os.path.join(source, folder, "README.md")):
                found.append(os.path.join(folder, "README.md"))
    docs = os.path.join(source, "docs")
    for name in sorted(os.listdir(docs)) if os.path.isdir(docs) else []:
        if name.endswith(".md") and os.path.join("docs", name) not in found:
            found.append(os.path.join("docs", name))
    return found


def parse_marker(text, where, problems):
    m = MARKER.match(text)
    if not m:
        return None
    kind, rest = m.group(1), m.group(2)
    if kind == "not runnable":
        why = rest.lstrip(":").strip()
        if not rest.startswith(":") or not why:
            problems.append(f"{where}: '<!-- not runnable: REASON -->' needs its reason")
        return ("not", why)
    options = {"add": {}, "files": []}
    for clause in [c.strip() for c in rest.split(";") if c.strip()]:
        add = re.match(r"^add to ([\w.-]+):\s*(.+)$", clause)
        files = re.match(r"^files:\s*(.+)$", clause)
        if add and add.group(1) in PROGRAMS:
            options["add"][add.group(1)] = add.group(2).strip()
        elif files:
            options["files"] += files.group(1).split()
        else:
            problems.append(f"{where}: unknown clause '{clause}' in the runnable marker (add to PROGRAM: ARGS; "
                            f"files: NAME ...; PROGRAM one of {', '.join(PROGRAMS)})")
    for name in options["files"]:
        if name not in FIXTURES:
            problems.append(f"{where}: no stand-in file '{name}' (known: {', '.join(sorted(FIXTURES))})")
    return ("runnable", options)


def read_blocks(source, path, problems):
    lines = open(os.path.join(source, path), encoding="utf-8").read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, ticks, info = fence.group(1), fence.group(2), fence.group(3).lower()
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(ticks):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        i += 1
        if info not in SHELL_INFO | PYTHON_INFO:
            continue
        marker_line = start - 1
        marker = parse_marker(lines[marker_line], f"{path}:{marker_line + 1}", problems) if start > 0 else None
        if marker is None and path not in MARKERS_NOT_REQUIRED:
            problems.append(f"{path}:{start + 1}: a ```{info} block without a marker: put '<!-- runnable -->' "
                            f"or '<!-- not runnable: REASON -->' on the line before it")
        blocks.append(Block(path, start + 1, info, body, marker))
    return blocks


# ---- Shell text: logical commands (continuation lines, open quotes and parentheses joined) ----

def logical_commands(lines):
    """[(index of the first line, [lines])] for every command of a shell block, comments and blank lines left out."""
    commands, current, first, depth, quote = [], [], 0, 0, None
    for index, line in enumerate(lines):
        if not current:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            first = index
        current.append(line)
        continued = False
        j = 0
        while j < len(line):
            c = line[j]
            if quote:
                if c == "\\" and quote == '"':
                    j += 1
                elif c == quote:
                    quote = None
            elif c in "'\"":
                quote = c
            elif c == "\\":
                if j == len(line) - 1:
                    continued = True
                j += 1
            elif c == "#" and (j == 0 or line[j - 1] in " \t;(|&"):
                break
            elif c == "(":
                depth += 1
            elif c == ")":
                depth = max(0, depth - 1)
            j += 1
        if not continued and depth == 0 and quote is None:
            commands.append((first, current))
            current = []
    if current:
        commands.append((first, current))
    return commands


def command_words(text):
    """The words of one command line, operators as words of their own; None where shlex cannot read it."""
    try:
        lexer = shlex.shlex(text.replace("\\\n", " "), posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        return list(lexer)
    except ValueError:
        return None


def program_calls(words):
    """(program, [its arguments]) for every call of one of ours among the words."""
    calls = []
    for k, word in enumerate(words):
        name = os.path.basename(word)
        if name in PROGRAMS:
            args = []
            for arg in words[k + 1:]:
                if re.fullmatch(r"[;&|()<>]+", arg):
                    break
                args.append(arg)
            calls.append((name, args))
    return calls


# ---- What our programs accept ----

def program_help(build, python, source):
    """{name or "name subcommand": its --help text (None when it failed)}, and the config keys."""
    helps, env = {}, dict(os.environ, T5SCALE_PYTHON=python, PYTHONDONTWRITEBYTECODE="1")
    for name in PROGRAMS:
        program = ([os.path.join(build, "bin", name)] if name in BUILD_PROGRAMS
                   else [os.path.join(source, "analysis", "t5scale-analyze")])
        for sub in ("",) + SUBCOMMANDS.get(name, ()):
            try:
                out = subprocess.run(program + ([sub] if sub else []) + ["--help"], capture_output=True, text=True,
                                     timeout=60, env=env)
                helps[f"{name} {sub}".strip()] = out.stdout + out.stderr if out.returncode == 0 else None
            except (OSError, subprocess.TimeoutExpired):
                helps[f"{name} {sub}".strip()] = None
    keys = set()
    try:
        reference = subprocess.run([os.path.join(build, "bin", "t5scale-train"), "--config-reference"],
                                   capture_output=True, text=True, timeout=60, env=env).stdout
        keys = set(re.findall(r"^\| `([a-z_0-9.]+)` \|", reference, re.M))
    except OSError:
        pass
    return helps, keys


def file_stamps(paths):
    """[path, size, time of change] of each path (None, None where it is missing)."""
    stamps = []
    for path in paths:
        try:
            st = os.stat(path)
            stamps.append([path, st.st_size, st.st_mtime_ns])
        except OSError:
            stamps.append([path, None, None])
    return stamps


def program_files(build, python, source):
    """What the --help texts and the config keys come from: our programs, the analysis command's wrapper and package,
    and the Python that runs it; each with its size and time of change."""
    paths = [os.path.join(build, "bin", name) for name in BUILD_PROGRAMS]
    paths.append(os.path.join(source, "analysis", "t5scale-analyze"))
    package = os.path.join(source, "analysis", "t5scale_analyze")
    if os.path.isdir(package):
        paths += sorted(os.path.join(package, name) for name in os.listdir(package))
    paths.append(os.path.realpath(python))
    return {"programs": PROGRAMS, "subcommands": SUBCOMMANDS, "python": python, "files": file_stamps(paths)}


def kept_while_unchanged(kept, stamp, is_kept, make):
    """What the documentation entries that share a --work folder (side by side under ctest -j) make once: under the
    lock kept.lock, make() runs unless is_kept() and kept.json holds `stamp` (what it is made from: sizes and times
    of change); it returns whether its result is worth keeping, and only then is the stamp written."""
    stamp = json.loads(json.dumps(stamp))
    os.makedirs(os.path.dirname(kept), exist_ok=True)
    with open(kept + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(kept + ".json") as f:
                if json.load(f) == stamp and is_kept():
                    return
        except (OSError, ValueError):
            pass
        if os.path.exists(kept + ".json"):
            os.remove(kept + ".json")
        if make():
            with open(kept + ".json", "w") as f:
                json.dump(stamp, f)


def shared_program_help(build, python, source, work):
    """program_help, asked once for the documentation entries that share the folder `work` (each program's --help
    costs 0.3 to 1 s of CPU) and kept in work/program_help while the files they come from are unchanged. Answers
    with a failed --help are not kept."""
    kept = os.path.join(work, "program_help")
    answers = {}

    def ask():
        helps, keys = program_help(build, python, source)
        answers.update(helps=helps, keys=sorted(keys))
        if not keys or any(text is None for text in helps.values()):
            return False
        with open(kept + ".tmp", "w") as f:
            json.dump(answers, f)
        os.replace(kept + ".tmp", kept)
        return True

    kept_while_unchanged(kept, program_files(build, python, source), lambda: os.path.isfile(kept), ask)
    if not answers:
        with open(kept) as f:
            answers = json.load(f)
    return answers["helps"], set(answers["keys"])


def nearest(word, known):
    close = difflib.get_close_matches(word, sorted(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def check_call_options(where, text, words, helps, keys, problems):
    """The options and --set keys that the words give to our programs, against their --help and config reference."""
    for name, args in program_calls(words):
        if args and args[0] in SUBCOMMANDS.get(name, ()):
            name, args = f"{name} {args[0]}", args[1:]
        help_text = helps.get(name)
        if help_text is None:
            problems.append(f"{where}: cannot check the options of {name}: its --help failed (is it built?)")
            continue
        known = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", help_text))
        for k, arg in enumerate(args):
            option = arg.split("=", 1)[0]
            if arg.startswith("--") and len(arg) > 2 and option not in known:
                problems.append(f"{where}: {name} has no option {option}{nearest(option, known)} (not in its "
                                f"--help): {text}")
            if name == "t5scale-train" and arg == "--set" and k + 1 < len(args) and keys:
                key = args[k + 1].split("=", 1)[0]
                if key not in keys and "$" not in key and "<" not in key:
                    problems.append(f"{where}: t5scale-train has no config key '{key}'{nearest(key, keys)} "
                                    f"(t5scale-train --config-reference): {text}")


def check_options(block, helps, keys, problems):
    if block.info not in SHELL_INFO:
        return
    for offset, line in enumerate(block.lines):
        if re.search(r"\\[ \t]+(#.*)?$", line):
            problems.append(f"{block.where(offset)}: a backslash followed by blanks or a comment does not continue "
                            f"the line (the command ends there): {line.strip()}")
    for first, lines in logical_commands(block.lines):
        words = command_words("\n".join(lines))
        if words is not None:
            check_call_options(block.where(first), lines[0].strip(), words, helps, keys, problems)


def check_inline_commands(source, path, helps, keys, problems):
    """Commands of ours quoted in the text (`t5scale-prep --help`) outside the fenced blocks."""
    inside = None
    for number, line in enumerate(open(os.path.join(source, path), encoding="utf-8").read().split("\n"), 1):
        fence = FENCE.match(line)
        if fence:
            inside = None if inside and line.strip().startswith(inside) else inside or fence.group(2)
            continue
        if inside:
            continue
        for span in re.findall(r"`([^`]+)`", line):
            words = command_words(span)
            if words and os.path.basename(words[0]) in PROGRAMS:
                check_call_options(f"{path}:{number}", f"`{span}`", words, helps, keys, problems)


# ---- Links ----

LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def prose_lines(text):
    """(number, line) of the lines outside fenced blocks, inline code spans blanked."""
    inside = None
    for number, line in enumerate(text.split("\n"), 1):
        fence = FENCE.match(line)
        if fence:
            inside = None if inside and line.strip().startswith(inside) else inside or fence.group(2)
            continue
        if not inside:
            yield number, re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line)


def heading_anchors(path):
    """The anchors GitHub gives the headings of a Markdown file: lower case, punctuation dropped, blanks as '-',
    '-1', '-2' ... after a repeated one."""
    anchors, seen = set(), {}
    for _, line in prose_lines(open(path, encoding="utf-8").read()):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).replace("`", "").strip().lower()).replace(" ", "-")
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def check_links(source, path, problems):
    """Every relative link of a document names a file or folder of the clone, and its #heading a heading there."""
    text = open(os.path.join(source, path), encoding="utf-8").read()
    for number, line in prose_lines(text):
        for target in LINK.findall(line):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue  # https:, mailto:
            file_part, _, anchor = target.partition("#")
            linked = os.path.normpath(os.path.join(os.path.dirname(os.path.join(source, path)), file_part)) \
                if file_part else os.path.join(source, path)
            if not os.path.exists(linked):
                problems.append(f"{path}:{number}: the link ({target}) names {os.path.relpath(linked, source)}, "
                                f"which does not exist")
            elif anchor and linked.endswith(".md") and anchor not in heading_anchors(linked):
                problems.append(f"{path}:{number}: the link ({target}): {os.path.relpath(linked, source)} has no "
                                f"heading '#{anchor}'")


# ---- Stand-in files ----

WORDS = ("the a and to of in is was for on with I you we will be cookies baked bring tomorrow meeting project "
         "dinner movie train late sorry great thanks see party Friday office coffee call later home now okay").split()


def make_samsum_jsonl(path, _context):
    rng = random.Random(7)

    def sentence(n):
        return " ".join(rng.choice(WORDS) for _ in range(n)) + rng.choice(".?")

    with open(path, "w") as out:
        for i in range(400):
            turns = [("Amanda: " if t % 2 == 0 else "Jerry: ") + sentence(2 + rng.randrange(12))
                     for t in range(2 + rng.randrange(6))]
            out.write(json.dumps({"id": str(13818513 + i), "dialogue": "\r\n".join(turns),
                                  "summary": sentence(3 + rng.randrange(10))}) + "\n")


def make_spiece_model(path, context):
    """A small unigram model with T5's ids, trained by t5scale-prep on the stand-in SAMSum file (T5's own
    spiece.model is a download)."""
    work, source, build = context["work"], context["source"], context["build"]
    jsonl = os.path.join(work, "samsum_train.jsonl")
    if not os.path.exists(jsonl):
        make_samsum_jsonl(jsonl, context)
    subprocess.run([os.path.join(build, "bin", "t5scale-prep"), "--recipe",
                    os.path.join(source, "data_prep/recipes/samsum.yaml"), "--input", jsonl,
                    "--out", os.path.join(context["scratch"], "spiece-training.h5"), "--train-tokenizer",
                    "--tokenizer-out", path, "--vocab-size", "100", "--progress", "none"],
                   check=True, capture_output=True, text=True)


STAND_IN_T5 = r"""
# A tiny T5 of t5-small's kind (v1.0: ReLU feed-forward, tied embeddings), randomly initialised and saved by
# transformers, laid out in the cache as huggingface_hub downloads a model (blobs, refs/main, a snapshot of links).
import hashlib, os, shutil, sys, tempfile
import sentencepiece, torch, transformers
tokenizer, model_dir = sys.argv[1], sys.argv[2]
pieces = sentencepiece.SentencePieceProcessor(model_file=tokenizer).get_piece_size()
torch.manual_seed(0)
config = transformers.T5Config(vocab_size=-(-(pieces + 100) // 128) * 128,  # T5: 100 sentinels on top
                               d_model=64, d_kv=16, d_ff=128, num_layers=2,
                               num_decoder_layers=2, num_heads=4, feed_forward_proj="relu", tie_word_embeddings=True,
                               decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
saved = tempfile.mkdtemp()
transformers.T5ForConditionalGeneration(config).save_pretrained(saved, safe_serialization=True)
shutil.copy(tokenizer, os.path.join(saved, "spiece.model"))
revision = hashlib.sha1(b"t5scale docs stand-in").hexdigest()
for sub in ["blobs", "refs", os.path.join("snapshots", revision)]:
    os.makedirs(os.path.join(model_dir, sub), exist_ok=True)
with open(os.path.join(model_dir, "refs", "main"), "w") as out:
    out.write(revision)
for name in sorted(os.listdir(saved)):
    data = open(os.path.join(saved, name), "rb").read()
    blob = hashlib.sha256(data).hexdigest()
    with open(os.path.join(model_dir, "blobs", blob), "wb") as out:
        out.write(data)
    os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(model_dir, "snapshots", revision, name))
shutil.rmtree(saved)
"""


def kept_stand_in(path, context, stamp, make):
    """Makes a stand-in at `path` as make(path, context) would, once for the entries that share the --work folder
    (context["shared"]; kept_while_unchanged), and copies it there. A stand-in that fails is not kept."""
    kept = os.path.join(context["shared"], "stand-ins", re.sub(r"[^A-Za-z0-9]+", "_", os.path.basename(path)))

    def make_kept():
        shutil.rmtree(kept, ignore_errors=True)
        make(kept, context)  # raises on failure: no stamp
        return True

    kept_while_unchanged(kept, stamp, lambda: os.path.isdir(kept), make_kept)
    shutil.copytree(kept, path, symlinks=True)


def make_hf_cache_t5_small(path, context):
    """t5-small in the Hugging Face cache, as a stand-in (t5-small is a download): a tiny randomly initialised T5
    saved by transformers, with a small tokenizer trained by t5scale-prep on the quickstart's sample data as its
    spiece.model. Made once for the entries that share the --work folder (about 7 CPU-seconds: transformers'
    import), while its inputs are unchanged (kept_stand_in)."""
    source, build, python = context["source"], context["build"], context["python"]
    inputs = [os.path.join(build, "bin", "t5scale-prep"), os.path.join(source, "jobs/quickstart/recipe.yaml"),
              os.path.join(source, "jobs/quickstart/my_data.jsonl"), os.path.realpath(python),
              *glob.glob(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(python))), "lib", "python*",
                                      "site-packages"))]  # a venv's: a package installed or replaced changes it
    stamp = {"maker": STAND_IN_T5, "python": python, "files": file_stamps(inputs)}
    kept_stand_in(path, context, stamp, make_t5_small_stand_in)


def make_t5_small_stand_in(path, context):
    source, build = context["source"], context["build"]
    tokenizer = os.path.join(context["scratch"], "tmp", "stand-in-t5-small-spiece.model")
    subprocess.run([os.path.join(build, "bin", "t5scale-prep"), "--recipe",
                    os.path.join(source, "jobs/quickstart/recipe.yaml"), "--input",
                    os.path.join(source, "jobs/quickstart/my_data.jsonl"),
                    "--out", os.path.join(context["scratch"], "tmp", "stand-in-tokenizer.h5"), "--train-tokenizer",
                    "--tokenizer-out", tokenizer, "--vocab-size", "100", "--progress", "none"],
                   check=True, capture_output=True, text=True)
    subprocess.run([context["python"], "-c", STAND_IN_T5, tokenizer, path], check=True, capture_output=True,
                   text=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))


# name -> (what it stands in for, maker); a name under ~/ is made in the scratch HOME
FIXTURES = {
    "samsum_train.jsonl": ("400 SAMSum-shaped records (id, dialogue, summary)", make_samsum_jsonl),
    "spiece.model": ("a small unigram SentencePiece model with T5's ids instead of T5's spiece.model",
                     make_spiece_model),
    "~/.cache/huggingface/hub/models--t5-small": (
        "t5-small in the Hugging Face cache: a tiny randomly initialised T5 saved by transformers, with a small "
        "tokenizer trained on jobs/quickstart/my_data.jsonl as its spiece.model", make_hf_cache_t5_small),
}


# ---- Running ----

def prepare_scratch(work, source, build, python):
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work)
    for name in LINKED:
        if os.path.exists(os.path.join(source, name)):
            os.symlink(os.path.join(source, name), os.path.join(work, name))
    if os.path.isdir(os.path.join(source, "results")):
        shutil.copytree(os.path.join(source, "results"), os.path.join(work, "results"), symlinks=True)
    os.makedirs(os.path.join(work, "slurm"))
    for name in os.listdir(os.path.join(source, "slurm")):
        if name != "README.md" and os.path.isdir(os.path.join(source, "slurm", name)):
            os.symlink(os.path.join(source, "slurm", name), os.path.join(work, "slurm", name))
    bin_dir = os.path.join(work, "build", "bin")
    os.makedirs(bin_dir)
    for name in PROGRAMS:
        real = (os.path.join(build, "bin", name) if name in BUILD_PROGRAMS
                else os.path.join(source, "analysis", "t5scale-analyze"))
        variable = "T5SCALE_DOCS_ADD_" + name.upper().replace("-", "_")
        wrapper = os.path.join(bin_dir, name)
        with open(wrapper, "w") as out:
            out.write(f"#!/usr/bin/env bash\n# {real} with the arguments the block's marker adds (${variable})\n"
                      f"exec {shlex.quote(real)} \"$@\" ${{{variable}:-}}\n")
        os.chmod(wrapper, 0o755)
    home = os.path.join(work, "home")
    os.makedirs(os.path.join(home, ".cache", "t5scale"))
    prefix = subprocess.run([python, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True,
                            check=True).stdout.strip()
    with open(os.path.join(home, ".cache", "t5scale", "venv-path"), "w") as out:
        out.write(prefix + "\n")
    os.makedirs(os.path.join(work, "tmp"))
    return bin_dir, home


def session_script(blocks, fail_file):
    """One bash script for the runnable blocks of a file: each command announced, each failure recorded."""
    out = ["set -o pipefail",
           f"__t5doc_fail() {{ printf '%s %s\\n' \"$__t5doc_at\" \"$1\" >> {shlex.quote(fail_file)}; }}",
           "trap '__t5doc_fail $?' ERR"]
    for b, block in enumerate(blocks):
        variables = ["T5SCALE_DOCS_ADD_" + name.upper().replace("-", "_") for name in PROGRAMS]
        out.append("unset " + " ".join(variables))
        for name, args in block.marker[1]["add"].items():
            out.append(f"export T5SCALE_DOCS_ADD_{name.upper().replace('-', '_')}={shlex.quote(args)}")
        if block.info in PYTHON_INFO:
            at = f"{b}:0"
            out.append(f"__t5doc_at={at}; echo {shlex.quote('[docs] ' + block.where() + ': (Python block)')}; "
                       "echo \"[docs-at] $EPOCHREALTIME\"")
            delimiter = "__T5DOC_PYTHON_BLOCK__"
            out.append(f'"$T5SCALE_PYTHON" - <<\'{delimiter}\'')
            out += block.lines + [delimiter]
            continue
        for first, lines in logical_commands(block.lines):
            announce = shlex.quote("[docs] " + block.where(first) + ": $ " + lines[0])
            out.append(f"__t5doc_at={b}:{first}; echo {announce}; echo \"[docs-at] $EPOCHREALTIME\"")
            out += lines
    out.append('echo "[docs] end"; echo "[docs-at] $EPOCHREALTIME"')
    return "\n".join(out) + "\n"


def run_file(path, blocks, context, env_base):
    scratch = os.path.join(context["work"], re.sub(r"[^A-Za-z0-9]+", "_", path))
    bin_dir, home = prepare_scratch(scratch, context["source"], context["build"], context["python"])
    context = dict(context, scratch=scratch)
    problems = []
    made = set()
    for block in blocks:
        for name in block.marker[1]["files"]:
            if name in made:
                continue
            where = os.path.join(home, name[2:]) if name.startswith("~/") else os.path.join(scratch, name)
            try:
                FIXTURES[name][1](where, dict(context, work=scratch, shared=context["work"]))
            except subprocess.CalledProcessError as e:
                problems.append(f"{block.where()}: cannot make the stand-in {name}: {e}\n{e.stdout}{e.stderr}")
            made.add(name)
    fail_file = os.path.join(scratch, "tmp", "failures")
    script = os.path.join(scratch, "tmp", "session.sh")
    with open(script, "w") as out:
        out.write(session_script(blocks, fail_file))
    env = dict(env_base, HOME=home, TMPDIR=os.path.join(scratch, "tmp"),
               PATH=bin_dir + os.pathsep + env_base.get("PATH", ""))
    try:
        done = subprocess.run(["bash", script], cwd=scratch, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, errors="replace", timeout=PER_FILE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
        output = done.stdout
    except subprocess.TimeoutExpired as e:
        output = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        problems.append(f"{path}: the runnable blocks did not finish within {PER_FILE_TIMEOUT_S} s; the last "
                        f"command started: {last_announced(output)}")
    with open(os.path.join(context["work"], re.sub(r"[^A-Za-z0-9]+", "_", path) + ".log"), "w") as log:
        log.write(output)
    context["timings"] += durations(output)
    failures = open(fail_file).read().split("\n") if os.path.exists(fail_file) else []
    for entry in [f for f in failures if f.strip()]:
        at, code = entry.split()
        b, first = (int(x) for x in at.split(":"))
        block = blocks[b]
        if block.info in PYTHON_INFO:
            announced = where = block.where()
            printed = command_output(output, announced)
            text = "(the Python block)"
            lines_run = re.findall(r'File "<stdin>", line (\d+)', command_output(output, announced, 10 ** 6))
            if lines_run:  # the line of the block that raised, as the traceback names it
                number = int(lines_run[-1])
                text = f"{block.lines[number - 1].strip()}  (line {number} of the Python block)"
                where = block.where(number)
        else:
            lines = dict(logical_commands(block.lines))[first]
            text, where = "\n    ".join(line.rstrip() for line in lines), block.where(first)
            printed = command_output(output, where)
        problems.append(f"{where}: exit {code}: {text}\n{indent(printed, '      | ')}")
    return problems


def durations(output):
    """[(seconds, 'file:line')] of every command the log announces, from the time stamps between them."""
    marks, where = [], None
    for line in output.split("\n"):
        if line.startswith("[docs] "):
            where = line[len("[docs] "):].split(": ", 1)[0]
        elif line.startswith("[docs-at] ") and where:
            marks.append((float(line.split()[1].replace(",", ".")), where))
    return [(later[0] - mark[0], mark[1]) for mark, later in zip(marks, marks[1:])]


def last_announced(output):
    announced = [line for line in output.split("\n") if line.startswith("[docs] ")]
    return announced[-1][len("[docs] "):] if announced else "(none)"


def command_output(output, where, limit=25):
    """The last lines a command printed: those after its announcement, up to the next."""
    lines, taken, inside = output.split("\n"), [], False
    for line in lines:
        if line.startswith("[docs] "):
            if inside:
                break
            inside = line.startswith(f"[docs] {where}: ")
            continue
        if inside and not line.startswith("[docs-at] "):
            taken.append(line)
    return "\n".join(taken[-limit:])


def indent(text, prefix):
    return textwrap.indent(text, prefix, lambda _line: True) if text.strip() else prefix + "(no output)"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", required=True)
    parser.add_argument("--build", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--file", action="append", help="only these documents (paths relative to --source)")
    parser.add_argument("--except", dest="excepted", action="append", default=[],
                        help="every document but these (paths relative to --source)")
    parser.add_argument("--list", action="store_true", help="print the marked blocks and run nothing")
    args = parser.parse_args()
    source, build = os.path.abspath(args.source), os.path.abspath(args.build)
    work = os.path.abspath(args.work)
    problems = []
    files = args.file or doc_files(source)
    for path in args.excepted:
        if path not in files:
            parser.error(f"--except {path}: not one of the documents ({', '.join(files)})")
    files = [path for path in files if path not in args.excepted]
    blocks = {path: read_blocks(source, path, problems) for path in files}
    if args.list:
        for path, found in blocks.items():
            for block in found:
                kind = "unmarked" if block.marker is None else "runnable" if block.runnable else \
                    "not runnable (" + block.marker[1] + ")"
                print(f"{block.where()}: {block.info}, {kind}")
        return 0
    helps, keys = shared_program_help(build, args.python, source, work)
    for path, found in blocks.items():
        check_links(source, path, problems)
        check_inline_commands(source, path, helps, keys, problems)
        for block in found:
            if block.marker is not None:
                check_options(block, helps, keys, problems)
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ)
    env.update({"T5SCALE_PYTHON": args.python, "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg",
                "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_mpi_yield_when_idle": "1",
                "OMP_NUM_THREADS": "1"})
    env.setdefault("OMPI_MCA_btl", "self,vader")
    for name in ["HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "TRANSFORMERS_CACHE"]:
        env.pop(name, None)  # a new user's machine: the cache is ~/.cache/huggingface/hub (in the scratch HOME)
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    ran, timings = 0, []
    for path, found in blocks.items():
        runnable = [b for b in found if b.runnable]
        if not runnable:
            continue
        ran += sum(len(logical_commands(b.lines)) if b.info in SHELL_INFO else 1 for b in runnable)
        problems += run_file(path, runnable, {"work": work, "source": source, "build": build,
                                              "python": args.python, "timings": timings}, env)
    if problems:
        print(f"{len(problems)} problem(s) in the documented commands (logs in {work}):\n")
        print("\n\n".join(problems))
        return 1
    marked = sum(1 for found in blocks.values() for b in found if b.marker is not None)
    print(f"ok: {ran} command(s) of {sum(1 for f in blocks.values() for b in f if b.runnable)} runnable block(s) "
          f"ran; {marked} marked block(s) of {len(files)} document(s) checked")
    slowest = sorted(timings, reverse=True)[:5]
    print(f"{sum(t for t, _ in timings):.0f} s in the commands; the slowest: " +
          ", ".join(f"{where} {seconds:.1f} s" for seconds, where in slowest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
