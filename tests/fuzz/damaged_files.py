"""Damaged files against every reader of them: each case ends within seconds with a result or a message naming
the file, never a hang, and never a crash without a message.

  run files   a finished run file (the demo's, results/demo/) and one whose writer was killed (SWMR flags still
              set), cut at many offsets, with bytes flipped in the superblock, in the first metadata blocks (object
              headers) and in the datasets' data; read by the analysis (t5scale_analyze.read_run, as t5scale-analyze,
              watch and the TensorBoard export read them), by the trainer's resume (RunFile::resume, through
              t5scale_run_file_probe, which the telemetry tests use) and by `t5scale-study status` (all at once, as
              the runs of one study)
  weights     a tiny T5 as pytorch_model.bin (torch.save) and as model.safetensors, each with a record or tensor
              cut short, lengthened, or two swapped, and the safetensors header's entries reordered (as valid as the
              original); loaded by t5scale-train (model.init_from, eval.only)

The cases come from a fixed seed; the files of cases that once failed are kept under regressions/damaged_files/
(as <case>.h5.gz) and run first. Python cases run in one worker process (importing pandas and h5py once) that the
test restarts when a case hangs or kills it.

usage: damaged_files.py --source DIR --build DIR --work DIR
"""
import argparse
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import time

CASE_TIMEOUT_S = 10.0
SIGNATURE_BYTES = 8


def run_file_cases(original, rng, prefix, work):
    """(name, bytes) of damaged copies of the run file `original` (edited copies made in the folder `work`)."""
    whole = open(original, "rb").read()
    size = len(whole)
    cases = [(f"{prefix}-cut-{n}", whole[:n]) for n in sorted({0, 8, 47, 96, 512, 2048, size // 4, size // 2,
                                                                  size - 4096, size - 100, size - 1})]
    def flipped(where):
        data = bytearray(whole)
        data[where] ^= 0xFF
        return bytes(data)
    for where in (8, 9, 11, 12, 28, 36, 44):  # version, offsets' size, flags, base, end of file, root header, checksum
        cases.append((f"{prefix}-superblock-{where}", flipped(where)))
    for where in sorted(rng.sample(range(48, 4096), 6)):
        cases.append((f"{prefix}-metadata-{where}", flipped(where)))
    for where in sorted(rng.sample(range(4096, size), 6)):
        cases.append((f"{prefix}-data-{where}", flipped(where)))
    cases.append((f"{prefix}-zeroed-middle", whole[:size // 3] + bytes(size // 3) + whole[2 * size // 3:]))
    # Whole HDF5 files without a table, as a tool that edits run files may leave them (not the killed writer's file,
    # which HDF5 opens for writing only after h5clear).
    import h5py
    for group in ("steps", "eval"):
        edited = os.path.join(work, f"{prefix}-no-{group}.edited")
        shutil.copyfile(original, edited)
        try:
            with h5py.File(edited, "r+") as f:
                del f[group]
        except (OSError, KeyError):
            continue
        cases.append((f"{prefix}-no-{group}", open(edited, "rb").read()))
    return cases


WORKER = r"""
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from t5scale_analyze import NotARunFile, read_run
for line in sys.stdin:
    path = Path(line.strip())
    try:
        run = read_run(path)
        answer = f"ok {len(run.steps)} steps"
    except NotARunFile as e:
        answer = "refused " + str(e)
    except Exception as e:  # an answer all the same, but not the reader's own refusal: reported as a failure
        answer = f"escaped {type(e).__name__}: {e}"
    print(answer.replace("\n", " ")[:400], flush=True)
"""


class AnalysisWorker:
    """One Python process reading a file per line on stdin, answering one line each."""

    def __init__(self, source, python):
        self.source, self.python, self.process, self.started = source, python, None, False

    def read(self, path):
        """'ok ...', 'refused ...', 'escaped ...', or 'hang'/'crash' when the reader did not answer in time."""
        import select
        first = self.process is None
        if first:
            self.process = subprocess.Popen([self.python, "-c", WORKER, os.path.join(self.source, "analysis")],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.process.stdin.write((str(path) + "\n").encode())
        self.process.stdin.flush()
        # One line per request and one request at a time: nothing is buffered beyond the answer awaited.
        ready, _, _ = select.select([self.process.stdout], [], [], CASE_TIMEOUT_S + (30.0 if first else 0.0))
        if not ready:
            self.close()
            return "hang"
        line = self.process.stdout.readline().decode(errors="replace").strip()
        if not line:
            self.close()
            return "crash"
        return line

    def close(self):
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


def run_program(command, timeout_s=CASE_TIMEOUT_S):
    """(verdict, output): 'ok', 'refused' (non-zero exit with a message), 'hang' or 'crash' (killed by a signal)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        return "hang", (e.stdout or "") if isinstance(e.stdout, str) else ""
    output = done.stdout + done.stderr
    if done.returncode < 0:
        return "crash", output
    return ("ok" if done.returncode == 0 else "refused"), output


def weight_cases(work, python):
    """Writes a tiny T5 as pytorch_model.bin and model.safetensors, and damaged copies; returns (name, folder)."""
    script = r"""
import io, os, sys, zipfile, json, struct, random
import torch
from transformers import T5Config, T5ForConditionalGeneration
work = sys.argv[1]
torch.manual_seed(0)
model = T5ForConditionalGeneration(T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4,
                                            decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))
good_bin = os.path.join(work, "good-bin")
good_st = os.path.join(work, "good-safetensors")
model.save_pretrained(good_bin, safe_serialization=False)
model.save_pretrained(good_st, safe_serialization=True)
cases = []
def copy_folder(src, name):
    dst = os.path.join(work, name)
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(src):
        if f not in ("pytorch_model.bin", "model.safetensors"):
            open(os.path.join(dst, f), "wb").write(open(os.path.join(src, f), "rb").read())
    return dst
def rezip(name, change):
    src = zipfile.ZipFile(os.path.join(good_bin, "pytorch_model.bin"))
    records = [(i, src.read(i)) for i in src.infolist()]
    data = sorted((i for i, _ in records if "/data/" in i.filename), key=lambda i: -i.file_size)
    records = change(records, [d.filename for d in data])
    dst = copy_folder(good_bin, name)
    with zipfile.ZipFile(os.path.join(dst, "pytorch_model.bin"), "w", zipfile.ZIP_STORED) as out:
        for info, content in records:
            out.writestr(info.filename, content)
    cases.append((name, dst))
def resize(target, delta):
    return lambda records, data: [(i, (b[:len(b) + delta] if delta < 0 else b + bytes(delta))
                                   if i.filename == data[target] else b) for i, b in records]
def swap(records, data):
    contents = {i.filename: b for i, b in records}
    a, b = data[0], data[-1]
    return [(i, contents[b] if i.filename == a else contents[a] if i.filename == b else c) for i, c in records]
rezip("bin-record-cut-4", resize(0, -4))
rezip("bin-record-cut-half", lambda r, d: resize(0, -len(dict((i.filename, b) for i, b in r)[d[0]]) // 2)(r, d))
rezip("bin-record-longer", resize(0, 64))
rezip("bin-records-swapped", swap)
whole = open(os.path.join(good_st, "model.safetensors"), "rb").read()
header_size = struct.unpack("<Q", whole[:8])[0]
header = json.loads(whole[8:8 + header_size])
def safetensors_case(name, data):
    dst = copy_folder(good_st, name)
    open(os.path.join(dst, "model.safetensors"), "wb").write(data)
    cases.append((name, dst))
safetensors_case("st-cut-4", whole[:-4])
safetensors_case("st-cut-half", whole[:len(whole) // 2])
safetensors_case("st-longer", whole + bytes(64))
names = [k for k in header if k != "__metadata__"]
big = max(names, key=lambda k: header[k]["data_offsets"][1] - header[k]["data_offsets"][0])
bad = dict(header)
bad[big] = dict(header[big], data_offsets=[header[big]["data_offsets"][0], header[big]["data_offsets"][1] - 4])
text = json.dumps(bad).encode()
safetensors_case("st-tensor-short", struct.pack("<Q", len(text)) + text + whole[8 + header_size:])
text = json.dumps(header).encode()[:-5]
safetensors_case("st-header-cut", struct.pack("<Q", header_size) + text + whole[8 + header_size:])
small = min(names, key=lambda k: header[k]["data_offsets"][1] - header[k]["data_offsets"][0])
bad = dict(header)
bad[big], bad[small] = dict(header[big], data_offsets=header[small]["data_offsets"]), \
    dict(header[small], data_offsets=header[big]["data_offsets"])
text = json.dumps(bad).encode()
safetensors_case("st-offsets-swapped", struct.pack("<Q", len(text)) + text + whole[8 + header_size:])
# The same entries in the reverse order: a file as valid as the original (the format does not order its header).
text = json.dumps(dict(reversed(list(header.items())))).encode()
safetensors_case("st-header-reordered", struct.pack("<Q", len(text)) + text + whole[8 + header_size:])
cases.insert(0, ("bin-good", good_bin))
cases.insert(1, ("st-good", good_st))
print(json.dumps(cases))
"""
    made = subprocess.run([python, "-c", script, work], capture_output=True, text=True, check=True)
    return json.loads(made.stdout.strip().splitlines()[-1])


def study_status(args, names, verdict, failures):
    folder = os.path.join(args.work, "study")
    fake_bin = os.path.join(folder, "bin")
    os.makedirs(fake_bin)
    for program in ("squeue", "sacct"):
        with open(os.path.join(fake_bin, program), "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(os.path.join(fake_bin, program), 0o755)
    spec = os.path.join(folder, "damaged.yaml")
    with open(spec, "w") as f:
        f.write("study: damaged\nbase:\n  model: {name: tiny}\n  precision: fp32\nslurm: {gpu: none}\nmode: list\n"
                "runs:\n" + "".join(f"  - {{name: {name}}}\n" for name in names))
    command = [os.path.join(args.build, "bin", "t5scale-study"), "status", spec, "--out", os.path.join(folder, "out"),
               "--results-dir", args.work]
    environment = dict(os.environ, PATH=fake_bin + os.pathsep + os.environ.get("PATH", ""))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=CASE_TIMEOUT_S * 4, env=environment)
    except subprocess.TimeoutExpired:
        verdict("t5scale-study status", f"{len(names)} damaged run files", "hang")
        return
    output = done.stdout + done.stderr
    if done.returncode != 0:
        verdict("t5scale-study status", f"{len(names)} damaged run files",
                "crash" if done.returncode < 0 else "escaped", output)
        return
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line.split()[:1] != []}
    for name in names:
        row = rows.get(name)
        if row is None:
            failures.append(f"t5scale-study status has no row for {name}: {output[-600:]}")
        elif row[4] == "unreadable":
            path = os.path.join(args.work, name + ".h5")
            verdict("t5scale-study status", name, "refused")
            if not any(line.startswith(f"note: {name}: ") and path in line for line in done.stdout.splitlines()):
                failures.append(f"t5scale-study status calls {name} unreadable without a note naming its file")
        else:
            verdict("t5scale-study status", name, "ok")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--build", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    python = sys.executable
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    rng = random.Random(59)
    started = time.monotonic()
    failures, counts = [], {}

    def verdict(reader, name, result, output=""):
        counts[result] = counts.get(result, 0) + 1
        if result in ("hang", "crash", "escaped"):
            failures.append(f"{reader} on {name}: {result} {output[-400:]}")

    # A run file whose writer was killed (its superblock still says "open for SWMR write"), by the probe.
    probe = os.path.join(args.build, "tests", "telemetry", "t5scale_run_file_probe")
    if not os.path.exists(probe):
        probe = os.path.join(args.build, "tests", "t5scale_run_file_probe")
    killed = os.path.join(args.work, "killed.h5")
    writer = subprocess.Popen([probe, "run", killed, "1000", "5", "1"], stdout=subprocess.PIPE, text=True)
    for line in writer.stdout:
        if line.startswith("flushed steps=") and int(line.split("=")[1].split()[0]) >= 40:
            break
    writer.kill()
    writer.wait()
    finished = os.path.join(args.work, "finished.h5")
    subprocess.run([probe, "write", finished, "60", "10", "5"], check=True, capture_output=True)

    cases = []
    regressions = os.path.join(args.source, "tests", "fuzz", "regressions", "damaged_files")
    if os.path.isdir(regressions):  # kept gzipped: mostly the zeros of unwritten chunks, a tenth of the size
        cases += [(f"regression-{n[:-len('.h5.gz')]}", gzip.open(os.path.join(regressions, n)).read())
                  for n in sorted(os.listdir(regressions)) if n.endswith(".h5.gz")]
    cases += run_file_cases(os.path.join(args.source, "results", "demo", "w1-tp1-dp1.h5"), rng, "demo", args.work)
    cases += run_file_cases(killed, rng, "killed", args.work)
    cases += run_file_cases(finished, rng, "probe", args.work)

    worker = AnalysisWorker(args.source, python)
    try:
        for name, data in cases:
            path = os.path.join(args.work, name + ".h5")
            with open(path, "wb") as f:
                f.write(data)
            answer = worker.read(path)
            verdict("the analysis", name, answer.split()[0], answer)
            if name.startswith(("probe", "killed")) or name.startswith("regression"):
                copy = path + ".resumed.h5"
                shutil.copyfile(path, copy)
                result, output = run_program([probe, "resume", copy, "20", "30", "5"])
                verdict("the trainer's resume", name, result, output)
    finally:
        worker.close()

    # `t5scale-study status` reads the same files as the runs of one study (list mode, a run per case, the work
    # folder as its results folder), with Slurm's squeue and sacct answering that they know no job.
    study_status(args, [name for name, _ in cases], verdict, failures)

    train = os.path.join(args.build, "bin", "t5scale-train")
    for name, folder in weight_cases(args.work, python):
        result, output = run_program([train, "--set", f"model.init_from={folder}", "--set", "eval.only=true",
                                      "--set", "eval.max_examples=8", "--set", "eval.metrics=loss",
                                      "--set", f"run.output_dir={args.work}/runs", "--set", f"run.name={name}",
                                      "--set", "data.synthetic_vocab_size=32", "--set", "precision=fp32"],
                                     timeout_s=30.0)
        verdict("t5scale-train", name, result, output)
        # A longer record or file holds every byte its tensors need: loaded or refused, either is an answer.
        if name.endswith(("-good", "-reordered")) and result != "ok":
            failures.append(f"t5scale-train refused the undamaged {name}: {output[-600:]}")
        if not name.endswith(("-good", "-longer", "-reordered")) and result == "ok":
            failures.append(f"t5scale-train loaded the damaged {name} without a word")
        if result == "refused" and folder not in output:
            failures.append(f"t5scale-train refused {name} without naming {folder}: {output[-600:]}")

    print(f"damaged files: {sum(counts.values())} reads, {counts} in {time.monotonic() - started:.1f} s")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
