"""Reader for t5scale run files (HDF5, schema 1: see "Run file" in the README).

A run file is opened with SWMR read, which works on a file that its job is still writing and on a file whose job
was killed (SIGKILL) without h5clear. Its /summary holds the run's figures as the trainer computes them: final
once the run has ended, else those of the rows flushed so far (status "running"). The reader takes them as they
are and computes none itself.

A run resumed on another grid has one file per grid: the job that resumed it set the old file aside (see
SET_ASIDE_NAME) and started a new one, which carries the figures of the grids before (/earlier_grids), so that the
newest file's /summary is the whole run's. `read_run` joins the files' rows into one run (`join_attempts`).
"""

from __future__ import annotations

import glob
import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import yaml

from .schema import FORMAT, SCHEMA_VERSION, summary_figures

# The metrics of /eval, in the order a report prefers them when no --metric is given.
EVAL_METRICS = ("rougeL", "rougeLsum", "rouge1", "rouge2", "f1", "exact_match", "accuracy", "macro_f1", "loss")
LOWER_IS_BETTER = {"loss"}

# A rank other than 0 that fails writes "<run>.failed.json" beside the run file: rank 0, which writes the file, may
# be waiting in a collective that never completes and be killed before it can record anything.
FAILURE_NOTE_SUFFIX = ".failed.json"

# A live job flushes its run file every telemetry.flush_every_steps steps and at each evaluation. A file saying
# "running" is read by how long nothing has written it:
#   - "running" within the job's own flush interval (running_window_s): its job is writing it;
#   - "stale" after STALE_AFTER_S: its job was, almost surely, killed (SIGKILL, a node lost) without a word. Long
#     evaluations of big models stay well under it;
#   - "incomplete" in between: silent for longer than its flushes take, so killed, or stuck, or in a first long
#     evaluation; the file cannot tell which.
STALE_AFTER_S = 2 * 3600.0
# A file written this recently reads "running" whatever its flush interval: the first flush comes after loading,
# the first evaluation and flush_every_steps steps, which the file cannot time before it holds any row.
RUNNING_WITHIN_S = 10 * 60.0
# ... and so does one written within this many of its own flush intervals (see running_window_s).
RUNNING_WITHIN_FLUSHES = 3
DEFAULT_FLUSH_EVERY_STEPS = 10  # telemetry.flush_every_steps (src/config/run_config.h), for a config without it
# The statuses of runs whose figures are not a finished run's: the report and the command print their notes.
UNFINISHED = ("running", "incomplete", "stale", "failed")

# A job that resumes a run on another world size cannot go on in the run file, whose per-rank columns have the
# old width: it renames the file "<run>.h5.world<old world size>.<UTC stamp>[.<n>]" and starts a new <run>.h5
# (attempt 1, its first row the checkpoint's step + 1). A file it cannot read is renamed
# "<run>.h5.unreadable.<stamp>[.<n>]" instead. (src/telemetry/run_file.cpp: set_aside_name.) The stamp is the
# time the file was set aside, so it orders the attempts; <n> tells apart files set aside in one second.
SET_ASIDE_NAME = re.compile(r"^(?P<run>.+\.h5)\.(?:world(?P<world>[0-9]+)|unreadable)"
                            r"\.(?P<stamp>[0-9]{8}T[0-9]{6}Z)(?:\.(?P<n>[0-9]+))?$")

# A file opened by a writer without SWMR (the trainer writing its /summary) is locked for a moment: try again.
OPEN_ATTEMPTS = 3
OPEN_RETRY_WAIT_S = 0.5


class NotARunFile(Exception):
    """The file is not a t5scale run file this reader understands; the message says why."""


@dataclass
class Run:
    path: Path
    attrs: dict  # root attributes, decoded to str / int / float (config_yaml included)
    config: dict  # config_yaml parsed ({} if it does not parse; see notes)
    steps: pd.DataFrame  # the 1-D datasets of /steps, one row per optimizer step
    rank_steps: dict  # the 2-D datasets of /steps: name -> array (rows, world_size); for a run of several files
    #                   (other world sizes), the newest file's rows (each file's are in `attempts`)
    evals: pd.DataFrame  # the datasets of /eval, one row per evaluation
    summary: dict  # the file's /summary attributes (the schema's figures; NaN where the file has none)
    status: str  # the summary's status; for a file still saying "running": "failed" when a rank left a failure
    #              note, "running" when written within its flush interval (running_window_s), "stale" when
    #              nothing wrote it for STALE_AFTER_S, else "incomplete" (see STALE_AFTER_S)
    summary_source: str  # "file" (the final figures), "flush" (those of the rows flushed so far: a running or
    #                      killed job's) or "none" (a file without /summary); for a run of several files, one per
    #                      file in attempt order ("flush,file")
    notes: list = field(default_factory=list)  # what the reader had to assume or repair, in words
    attempts: list = field(default_factory=list)  # Attempt: the run's files in the order they were written; one
    #                                               for a run that never changed grid
    unjoined: list = field(default_factory=list)  # Skipped: set-aside files of the run that could not be joined
    earlier_grids: dict = field(default_factory=dict)  # /earlier_grids: what the grids before this file's left it

    @property
    def run_id(self) -> str:
        return str(self.attrs.get("run_id") or self.path.stem)


@dataclass
class Attempt:
    """One run file of a run: the file of one grid, written by one attempt or by several on that grid (a resume
    on the same grid goes on in the same file; its `attempt` attribute counts them)."""
    path: Path
    world_size: int
    nodes: int
    attempt: int  # the file's root attribute `attempt`
    status: str  # the file's status, read alone
    summary: dict  # the file's /summary, read alone (a file started on a new grid includes the grids before)
    own_wall_time_s: float  # the wall time of this file's attempts alone (its grid's share of the run's)
    first_step: int  # the file's first and last /steps row (-1 without rows)
    last_step: int
    steps_joined: int  # the file's /steps and /eval rows that the run's rows hold (the first ones): the rest
    evals_joined: int  # were redone by a later attempt
    last_joined_step: int  # the step of the last of them (-1 without)
    rank_steps: dict  # the file's 2-D /steps datasets, cut to the joined rows
    recorded: bool = True  # False for a file whose wall time is unknown: its job recorded no time or energy
    notes: list = field(default_factory=list)


@dataclass
class Skipped:
    path: Path
    reason: str


def find_run_files(folder) -> list:
    """Every `*.h5` file under `folder`, recursively, sorted (temporary `*.h5.tmp.<pid>` files and set-aside
    `*.h5.world<N>.<stamp>` files do not match)."""
    return sorted(p for p in Path(folder).rglob("*.h5") if p.is_file())


def find_set_aside_files(folder) -> list:
    """Every set-aside run file (SET_ASIDE_NAME) under `folder`, recursively, sorted."""
    return sorted(p for p in Path(folder).rglob("*.h5.*") if p.is_file() and SET_ASIDE_NAME.match(p.name))


def set_aside_beside(path) -> list:
    """The files that jobs resuming run file `path` set aside, oldest first: [(path, world size or None for an
    unreadable one)]."""
    path = Path(path)
    found = []
    for candidate in path.parent.glob(glob.escape(path.name) + ".*"):
        match = SET_ASIDE_NAME.match(candidate.name)
        if match is None or match["run"] != path.name or not candidate.is_file():
            continue
        key = (match["stamp"], int(match["n"] or 0))
        found.append((key, candidate, int(match["world"]) if match["world"] is not None else None))
    return [(candidate, world) for _, candidate, world in sorted(found, key=lambda item: item[0])]


def read_folder(folder) -> tuple:
    """Reads every run under `folder`: each `*.h5` run file joined with its set-aside attempts, and a run whose
    files were all set aside. Returns (runs, skipped): files that are not readable run files are listed in
    `skipped` with the reason, never raised; so are set-aside files that could not be joined to their run."""
    runs, skipped = [], []
    paths = set(find_run_files(folder))
    paths |= {p.with_name(SET_ASIDE_NAME.match(p.name)["run"]) for p in find_set_aside_files(folder)}
    for path in sorted(paths):
        try:
            run = read_run(path)
        except NotARunFile as e:
            aside = [aside_path for aside_path, _ in set_aside_beside(path)]
            if path.exists():
                skipped.append(Skipped(path, str(e)))
                skipped += [Skipped(a, f"set aside by a job that resumed {path.name}, which is skipped: not read")
                            for a in aside]
            else:
                skipped += [Skipped(a, str(e)) for a in aside]
            continue
        runs.append(run)
        skipped += run.unjoined
    return runs, skipped


def decode(value):
    """An HDF5 attribute value as a plain Python value: fixed-length strings to str, numpy scalars to int/float."""
    if isinstance(value, np.ndarray):
        if value.size == 1:
            value = value.reshape(()).item()
        else:
            return [decode(v) for v in value.tolist()]
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).rstrip(b"\0").decode("utf-8", errors="replace")
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
SWMR_WRITE_FLAG = 0x04  # a version 3 superblock's file consistency flag: a writer had the file open in SWMR mode
LIVE_WRITER_GRACE_S = 0.5


def hdf5_damage(path: Path) -> str | None:
    """Why the HDF5 file at `path` is damaged, from what its superblock says cheaply; None when nothing shows."""
    return _superblock_check(path)[0]


def _superblock_check(path: Path) -> tuple:
    """(why the file is damaged or None, whether a SWMR writer has it open or died with it open).

    HDF5 compares the stored end of file with the file's size only when a file is opened without SWMR; opened with
    SWMR (as a live run file must be) a truncated file makes the library retry its metadata reads with growing
    sleeps, for minutes. So the superblock is read here first: a file shorter than the end it
    records is truncated. A file longer than it is fine (a SWMR writer updates the stored end at its flushes, after
    the data). A writer in SWMR mode extends the file as it records the new end: a gap is looked at once more after
    a moment before the file is called truncated.
    """
    size = path.stat().st_size
    with open(path, "rb") as f:
        offset = 0
        while True:  # the superblock is at 0, 512, 1024, 2048, ... (a user block may come first)
            if offset + 48 > size:
                return f"no HDF5 superblock in its {size} bytes (not an HDF5 file, or cut before its first block)", False
            f.seek(offset)
            head = f.read(96)
            if head[:8] == HDF5_SIGNATURE:
                break
            offset = 512 if offset == 0 else 2 * offset
    version = head[8]
    if version in (0, 1):
        sizeof_offsets, flags = head[13], int.from_bytes(head[20:24], "little")
        addresses = 24 + (4 if version == 1 else 0)  # base, free-space info, end of file, driver info
    elif version in (2, 3):
        sizeof_offsets, flags = head[9], head[11]
        addresses = 12  # base, superblock extension, end of file, root object header
    else:
        return f"superblock version {version} at byte {offset}, which no HDF5 1.10 writes", False
    if sizeof_offsets not in (2, 4, 8) or addresses + 3 * sizeof_offsets > len(head):
        return f"superblock at byte {offset} gives {sizeof_offsets}-byte addresses", False

    def address(index):
        start = addresses + index * sizeof_offsets
        return int.from_bytes(head[start:start + sizeof_offsets], "little")

    swmr_writer = version == 3 and bool(flags & SWMR_WRITE_FLAG)
    end = address(2)  # from the file's first byte, a user block included (the base address is the superblock's)
    if size >= end:
        return None, swmr_writer
    if swmr_writer:
        time.sleep(LIVE_WRITER_GRACE_S)
        size = path.stat().st_size
        if size >= end:
            return None, swmr_writer
    return f"truncated: {size} bytes, but its superblock says the file ends at byte {end}", swmr_writer


# A SWMR reader retries a metadata read whose checksum fails, for a writer that may be writing that block: 100 times
# by default, with growing sleeps, minutes on a file damaged inside. The trainer and `t5scale-study status` read with
# 10 attempts (src/core/hdf5_superblock.h), which answer a damaged file in milliseconds; h5py does not expose the
# setting, so it is set on the file access list through the HDF5 library h5py loaded.
SWMR_METADATA_READ_ATTEMPTS = 10


def _hdf5_library():
    import ctypes
    import glob
    import os
    here = os.path.dirname(h5py.__file__)
    for pattern in (os.path.join(os.path.dirname(here), "h5py.libs", "libhdf5-*.so*"), os.path.join(here, "libhdf5*.so*")):
        for candidate in sorted(glob.glob(pattern)):
            if "_hl" not in os.path.basename(candidate):
                return ctypes.CDLL(candidate)
    # An h5py built against a system HDF5: its symbols are in the process already.
    library = ctypes.CDLL(None)
    return library if hasattr(library, "H5Pset_metadata_read_attempts") else None


def _open_swmr(path: Path) -> h5py.File:
    """h5py.File(path, "r", swmr=True) with at most SWMR_METADATA_READ_ATTEMPTS reads of a damaged block."""
    import ctypes
    library = _hdf5_library()
    if library is None:
        return h5py.File(path, "r", swmr=True)
    access = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    access.set_fclose_degree(h5py.h5f.CLOSE_STRONG)
    if library.H5Pset_metadata_read_attempts(ctypes.c_int64(access.id), ctypes.c_uint(SWMR_METADATA_READ_ATTEMPTS)) < 0:
        return h5py.File(path, "r", swmr=True)
    file_id = h5py.h5f.open(str(path).encode(), h5py.h5f.ACC_RDONLY | h5py.h5f.ACC_SWMR_READ, fapl=access)
    return h5py.File(file_id)


def _open(path: Path) -> h5py.File:
    try:
        damage, swmr_writer = _superblock_check(path)
    except OSError as e:  # gone, a folder, not readable
        raise NotARunFile(f"cannot be opened as HDF5: {e}") from e
    if damage is not None:
        raise NotARunFile(damage)
    last_error = None
    for _ in range(OPEN_ATTEMPTS):
        try:
            # SWMR reading only where a SWMR writer has the file (a live job, or one killed without closing it): it
            # retries failed metadata reads for a writer that may still be writing them, which a closed file never
            # needs, and HDF5 checks a closed file's metadata at once.
            return _open_swmr(path) if swmr_writer else h5py.File(path, "r")
        except OSError as e:
            last_error = e
            # Only a lock held by a writer is worth waiting for; a file that is not HDF5 will not become one.
            if "lock" not in str(e).lower():
                break
            time.sleep(OPEN_RETRY_WAIT_S)
    if "lock" in str(last_error).lower():
        raise NotARunFile(f"locked by a process writing it without SWMR (a job writing its /summary at the end); "
                          f"run the analysis again in a moment ({last_error})")
    raise NotARunFile(f"cannot be opened as HDF5: {last_error}")


def read_failure_note(path: Path) -> dict | None:
    """The failure note "<run>.failed.json" beside run file `path` ({"rank", "error", "step", ...}), or None."""
    note_path = path.with_suffix(FAILURE_NOTE_SUFFIX)
    try:
        note = json.loads(note_path.read_text())
    except (OSError, ValueError):
        return None
    return note if isinstance(note, dict) else None


def read_run(path, now: float | None = None) -> Run:
    """Reads the run of run file `path`, joined with the files that jobs resuming it on another grid set aside
    beside it (`join_attempts`); `now` (seconds since the epoch; default the clock) decides whether it is stale.
    Without `path` but with set-aside files, the newest readable of them stands for the run file. Raises
    NotARunFile when `path` is not a readable run file (or, without it, no set-aside file is)."""
    path = Path(path)
    aside = set_aside_beside(path)
    if not aside:
        return read_run_file(path, now)
    earlier, unjoined = [], []
    for aside_path, world in aside:
        if world is None:
            unjoined.append(Skipped(aside_path, f"set aside as unreadable by a job that resumed {path.name}: not "
                                                f"joined, so the run's totals leave out the attempt that wrote it"))
            continue
        try:
            earlier.append(read_run_file(aside_path, now, set_aside=True))
        except NotARunFile as e:
            unjoined.append(Skipped(aside_path, f"an earlier attempt of {path.name} (world size {world}) that "
                                                f"cannot be read, so the run's totals leave it out: {e}"))
    if path.exists() or not earlier:
        try:
            current = read_run_file(path, now)
        except NotARunFile as e:
            if path.exists():
                raise
            raise NotARunFile(f"no run file {path.name} beside it and no readable attempt set aside: "
                              + "; ".join(f"{u.path.name}: {u.reason}" for u in unjoined)) from e
    else:
        current = earlier.pop()
        current.notes.append(f"there is no {path.name}: the newest attempt set aside stands for the run file")
    return join_attempts(earlier + [current], unjoined)


def read_run_file(path, now: float | None = None, set_aside: bool = False) -> Run:
    """Reads one run file alone; `set_aside`: a file that a resuming job set aside (its job has ended)."""
    path = Path(path)
    try:
        return _read_run_file(path, now, set_aside)
    except NotARunFile:
        raise
    except (OSError, KeyError, RuntimeError, ValueError, TypeError, IndexError) as e:
        # A file damaged inside (a flipped byte in an object header or a dataset's chunk index): HDF5's checksums
        # and h5py's checks fail at some read; the file is named and skipped as the others are.
        raise NotARunFile(f"damaged: {type(e).__name__}: {e}") from e


def _read_run_file(path: Path, now: float | None, set_aside: bool) -> Run:
    with _open(path) as f:
        attrs = {name: decode(f.attrs[name]) for name in f.attrs}
        fmt = attrs.get("format")
        if fmt != FORMAT:
            raise NotARunFile(f"format attribute is {fmt!r}, not {FORMAT!r}" if fmt is not None
                              else f"no 'format' attribute: not a {FORMAT} file")
        version = attrs.get("schema_version")
        if version != SCHEMA_VERSION:
            raise NotARunFile(f"schema_version {version!r}: this reader reads schema {SCHEMA_VERSION}")
        notes = []
        steps, rank_steps = _read_table(f, "steps", notes)
        evals, _ = _read_table(f, "eval", notes)
        file_summary = ({name: decode(v) for name, v in f["summary"].attrs.items()}
                        if isinstance(f.get("summary"), h5py.Group) else None)
        earlier_grids = ({name: decode(v) for name, v in f["earlier_grids"].attrs.items()}
                         if isinstance(f.get("earlier_grids"), h5py.Group) else {})

    config = {}
    try:
        parsed = yaml.safe_load(attrs.get("config_yaml") or "") or {}
        if isinstance(parsed, dict):
            config = parsed
        else:
            notes.append("config_yaml is not a mapping; no cfg.* columns")
    except yaml.YAMLError as e:
        notes.append(f"config_yaml does not parse ({str(e).splitlines()[0]}); no cfg.* columns")

    file_status = attrs.get("status", "")
    summary = unknown_summary()
    if file_summary is None:
        source = "none"
        notes.append("no /summary: the figures of this file are unknown")
    else:
        summary.update(file_summary)
        # The final figures carry the end's time; a flush's (running, or a failure recorded on the way down) do not.
        source = "file" if file_summary.get("end_time_utc") else "flush"
    if source == "file":
        status = str(file_summary["status"])
    else:
        figures = f"its figures are those of the {len(steps)} flushed steps" if source == "flush" else "its figures are unknown"
        note = read_failure_note(path) if (file_status == "running" or not file_status) and not set_aside else None
        idle_s = (time.time() if now is None else now) - path.stat().st_mtime
        if set_aside and (file_status == "running" or not file_status):
            status = "incomplete"
            notes.append(f"status {file_status!r}: the job of this attempt was killed before its end (a later job "
                         f"set the file aside); {figures}")
        elif note is not None:
            status = "failed"
            summary["error"] = str(note.get("error", ""))
            summary["error_step"] = note.get("step", -1)
            notes.append(f"rank {note.get('rank', '?')} failed after step {note.get('step', '?')}: "
                         f"{note.get('error', '')} ({path.with_suffix(FAILURE_NOTE_SUFFIX).name}); {figures}")
        elif (file_status == "running" or not file_status) and idle_s > STALE_AFTER_S:
            status = "stale"
            notes.append(f"status {file_status!r}, and nothing written for {idle_s / 3600:.1f} h: the job was most "
                         f"likely killed (SIGKILL, a lost node); {figures}")
        elif (file_status == "running" or not file_status) and idle_s <= running_window_s(config, steps, evals):
            status = "running"
            notes.append(f"status {file_status!r}, written {_duration_text(idle_s)} ago, within its flush interval: "
                         f"its job is writing it (or was killed since its last flush); {figures}")
        elif file_status == "running" or not file_status:
            status = "incomplete"
            window = running_window_s(config, steps, evals)
            notes.append(f"status {file_status!r}, and nothing written for {_duration_text(idle_s)}, longer than "
                         f"its flushes take ({_duration_text(window)}): the job was killed or is stuck, or in a long "
                         f"evaluation (the file cannot tell which); {figures}")
        else:
            status = file_status
            if file_status == "failed":
                summary["error"] = str(attrs.get("error", ""))
                summary["error_step"] = attrs.get("error_step", -1)
                notes.append(f"failed after step {attrs.get('error_step', '?')}: {attrs.get('error', '')}; {figures}")
    summary["status"] = status
    run = Run(path=path, attrs=attrs, config=config, steps=steps, rank_steps=rank_steps, evals=evals,
              summary=summary, status=status, summary_source=source, notes=notes, earlier_grids=earlier_grids)
    run.attempts = [_attempt_of(run, len(steps), len(evals), rank_steps)]
    return run


def running_window_s(config: dict, steps: pd.DataFrame, evals: pd.DataFrame) -> float:
    """How long a file saying "running" may go unwritten and still read "running": RUNNING_WITHIN_FLUSHES of its
    flush intervals (telemetry.flush_every_steps x the median step time of its rows, plus its longest evaluation,
    which a flush may wait for), at least RUNNING_WITHIN_S."""
    telemetry = config.get("telemetry") if isinstance(config.get("telemetry"), dict) else {}
    try:
        flush_every = max(1, int(telemetry.get("flush_every_steps", DEFAULT_FLUSH_EVERY_STEPS)))
    except (TypeError, ValueError):
        flush_every = DEFAULT_FLUSH_EVERY_STEPS
    step_times = _column(steps, "step_time_s")
    step_times = step_times[np.isfinite(step_times)]
    eval_times = _column(evals, "eval_time_s")
    eval_times = eval_times[np.isfinite(eval_times)]
    interval = ((flush_every * float(np.median(step_times)) if step_times.size else 0.0)
                + (float(eval_times.max()) if eval_times.size else 0.0))
    return max(RUNNING_WITHIN_S, RUNNING_WITHIN_FLUSHES * interval)


def _duration_text(seconds: float) -> str:
    """12 s, 14 min, 1.5 h."""
    if seconds < 120:
        return f"{max(seconds, 0.0):.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _own_wall_time_s(run: Run) -> float:
    """The wall time of a file's own attempts: its /summary's, less the earlier grids' it includes."""
    wall = float(run.summary.get("wall_time_s", math.nan))
    return wall - float(run.earlier_grids.get("wall_time_s", 0.0))


def _attempt_of(run: Run, steps_joined: int, evals_joined: int, rank_steps: dict) -> Attempt:
    step = run.steps["step"].to_numpy() if "step" in run.steps else np.zeros(0, dtype=np.int64)
    return Attempt(path=run.path, world_size=int(run.attrs.get("world_size", 1) or 1),
                   nodes=int(run.attrs.get("nodes", 1) or 1), attempt=int(run.attrs.get("attempt", 0) or 0),
                   status=run.status, summary=dict(run.summary),
                   own_wall_time_s=_own_wall_time_s(run),
                   first_step=int(step[0]) if step.size else -1, last_step=int(step[-1]) if step.size else -1,
                   steps_joined=steps_joined, evals_joined=evals_joined,
                   last_joined_step=int(step[steps_joined - 1]) if steps_joined else -1, rank_steps=rank_steps,
                   recorded=math.isfinite(_own_wall_time_s(run)),
                   notes=list(run.notes))


# ---------------------------------------------------------------------------------------------------------------
# A run of several files: one per grid it ran on.

def _start_step(run: Run) -> int | None:
    """The first step a file's attempt trained: its first row's, else the step after `resumed_from_step`."""
    if "step" in run.steps and len(run.steps):
        return int(run.steps["step"].iloc[0])
    resumed = run.attrs.get("resumed_from_step", -1)
    return resumed + 1 if isinstance(resumed, int) and resumed >= 0 else None


def _steps_range(first: int, last: int) -> str:
    return f"steps {first}-{last}" if first >= 0 else "no steps"


def join_attempts(files: list, unjoined: list) -> Run:
    """One run from its files (Run, read alone), oldest first, the newest (the run file) last; `unjoined`: the
    set-aside files that could not be read (Skipped), named in the notes.

    Rows: each file's rows up to the first step of a later file, in step order. A resumed attempt starts from its
    checkpoint's step, so the older file may hold rows past it (flushed before the job ended); those steps were
    trained again, and for every step that both files hold the later file's row is the one kept. The older rows
    of steps the later attempt has not reached yet are left out too: the run goes on from the checkpoint, not
    from them. The wall_time_s of a file's rows are shifted by the known wall time of the
    files before, so that they count from the run's first start as a resume on one grid does; the per-rank
    counters (energy) stay each file's own.

    Figures: the newest file's /summary, which the writer made the whole run's (the job that started it carried
    over the totals of the rows kept and what the grids before spent: /earlier_grids). Status, end time and
    error are the newest file's too."""
    current = files[-1]
    if len(files) == 1:
        current.notes += [f"{u.path.name}: {u.reason}" for u in unjoined]
        current.unjoined = list(unjoined)
        return current
    starts = [_start_step(run) for run in files]
    attempts, step_parts, eval_parts, dropped = [], [], [], []
    offset = 0.0
    for i, run in enumerate(files):
        later = [s for s in starts[i + 1:] if s is not None]
        cut = min(later) if later else None
        keep_steps = _before(run.steps, cut)
        keep_evals = _before(run.evals, cut)
        steps = _shifted(run.steps.iloc[:keep_steps], offset)
        evals = _shifted(run.evals.iloc[:keep_evals], offset)
        step_parts.append(steps)
        eval_parts.append(evals)
        rank_steps = {name: a[:keep_steps] for name, a in run.rank_steps.items()}
        attempts.append(_attempt_of(run, keep_steps, keep_evals, rank_steps))
        if keep_steps < len(run.steps) or keep_evals < len(run.evals):
            dropped.append((run, keep_steps, keep_evals, cut))
        wall = attempts[-1].own_wall_time_s
        offset += wall if math.isfinite(wall) else 0.0

    steps = pd.concat(step_parts, ignore_index=True) if any(len(p.columns) for p in step_parts) else pd.DataFrame()
    evals = pd.concat(eval_parts, ignore_index=True) if any(len(p.columns) for p in eval_parts) else pd.DataFrame()
    summary = dict(current.summary)
    notes = [f"joined {len(files)} run files, one per grid: "
             + ", ".join(f"{a.path.name} (world size {a.world_size}, {a.nodes} node(s), "
                         f"{_steps_range(a.first_step, a.last_step)})" for a in attempts)
             + f"; the figures are {current.path.name}'s, which carries those of the grids before"]
    if not current.earlier_grids:
        notes.append(f"{current.path.name} carries no figures of the grids before (its job could not read the file "
                     f"it set aside): the figures are those of its own grid")
    for run, keep_steps, keep_evals, cut in dropped:
        redone = run.steps.iloc[keep_steps:]
        what = ([f"{len(redone)} rows of steps {int(redone['step'].iloc[0])}-{int(redone['step'].iloc[-1])}"]
                if len(redone) else []) + ([f"{len(run.evals) - keep_evals} evaluation(s)"]
                                           if keep_evals < len(run.evals) else [])
        notes.append(f"{run.path.name}: its {' and '.join(what)} are left out: a later attempt trained from step "
                     f"{cut} on again, and its rows are the ones kept for the steps both files hold (the time and "
                     f"energy spent on the rows left out still count)")
    for a in attempts:
        if not a.recorded and any(other.recorded for other in attempts):
            notes.append(f"{a.path.name}: no rows and no wall time: its job recorded no time or energy, so none is "
                         f"counted (as after a resume on one grid, what a job did after its last flush is not known)")
        notes += [f"{a.path.name}: {note}" for note in a.notes]
    notes += [f"{u.path.name}: {u.reason}" for u in unjoined]
    return Run(path=current.path, attrs=current.attrs, config=current.config, steps=steps,
               rank_steps=attempts[-1].rank_steps, evals=evals, summary=summary, status=current.status,
               summary_source=",".join(run.summary_source for run in files), notes=notes, attempts=attempts,
               unjoined=list(unjoined), earlier_grids=current.earlier_grids)


def _before(table: pd.DataFrame, cut: int | None) -> int:
    """How many of a table's rows (in step order) have a step before `cut` (all of them without a cut)."""
    if cut is None or "step" not in table:
        return len(table)
    return int(np.searchsorted(table["step"].to_numpy(), cut, side="left"))


def _shifted(table: pd.DataFrame, offset: float) -> pd.DataFrame:
    if offset == 0.0 or "wall_time_s" not in table:
        return table.reset_index(drop=True)
    return table.assign(wall_time_s=table["wall_time_s"].to_numpy(dtype=np.float64) + offset).reset_index(drop=True)


def _counted(attempts: list) -> list:
    """The files whose wall time the run's node-hours count: those that recorded any (all when none did, the
    node-hours then being unknown)."""
    recorded = [a for a in attempts if a.recorded]
    return recorded or attempts


def attempt_count(run: Run) -> int:
    """How many attempts ran the run: the first file's `attempt` + 1 (it counts from 0), plus each later file's
    `attempt` (a file started on a new grid counts from 1, the attempts before it being in the older files)."""
    if not run.attempts:
        return int(run.attrs.get("attempt", 0) or 0) + 1
    return run.attempts[0].attempt + 1 + sum(max(a.attempt, 1) for a in run.attempts[1:])


def attempt_hours(run: Run) -> tuple:
    """(node-hours, GPU-hours) of the run: each file's wall time at its own node count and world size (the files
    that recorded any, as for the run's wall time)."""
    attempts = _counted(run.attempts or [_attempt_of(run, len(run.steps), len(run.evals), run.rank_steps)])
    node_hours = sum(a.nodes * a.own_wall_time_s for a in attempts) / 3600.0
    gpu_hours = sum(a.world_size * a.own_wall_time_s for a in attempts) / 3600.0
    return node_hours, gpu_hours


def _read_table(f: h5py.File, group: str, notes: list) -> tuple:
    """The datasets of /steps or /eval as (DataFrame of the 1-D ones, {name: 2-D array}), cut to the rows that
    every dataset holds and that a writer really wrote (see `_written_rows`)."""
    if group not in f or not isinstance(f[group], h5py.Group):
        notes.append(f"no /{group} group")
        return pd.DataFrame(), {}
    datasets = {name: ds for name, ds in f[group].items() if isinstance(ds, h5py.Dataset) and ds.ndim in (1, 2)}
    if not datasets:
        return pd.DataFrame(), {}
    lengths = {name: ds.shape[0] for name, ds in datasets.items()}
    rows = min(lengths.values())
    if max(lengths.values()) != rows:
        # A writer killed between extending one dataset and the next leaves them one row apart.
        notes.append(f"/{group} datasets differ in length ({min(lengths.values())}..{max(lengths.values())} rows); "
                     f"read the {rows} rows they all hold")
    columns, per_rank = {}, {}
    for name, ds in datasets.items():
        data = ds[:rows] if rows else np.zeros((0,) + ds.shape[1:], dtype=ds.dtype)
        if ds.ndim == 1:
            columns[name] = data
        else:
            per_rank[name] = np.asarray(data, dtype=np.float64)
    table = pd.DataFrame(columns)
    written = _written_rows(table, strictly_increasing=(group == "steps"))
    if written < len(table):
        notes.append(f"/{group}: {len(table) - written} trailing rows hold no data (extended but not written "
                     f"before the writer stopped); read the first {written}")
        table = table.iloc[:written].reset_index(drop=True)
        per_rank = {name: a[:written] for name, a in per_rank.items()}
    return table, per_rank


def _written_rows(table: pd.DataFrame, strictly_increasing: bool) -> int:
    """Rows are written in step order and wall time never goes back, so the first row whose step is a fill value
    (-1), or goes back (or stands still in /steps, one row per optimizer step; /eval may evaluate twice at one
    step), or whose wall_time_s goes back, is a row that was extended but never written."""
    if "step" not in table:
        return len(table)
    step = table["step"].to_numpy()
    wall = _column(table, "wall_time_s")
    for i in range(len(table)):
        if step[i] < 0:
            return i
        if i == 0:
            continue
        if step[i] < step[i - 1] or (strictly_increasing and step[i] == step[i - 1]):
            return i
        if wall[i] < wall[i - 1]:  # False when either is NaN
            return i
    return len(table)


# ---------------------------------------------------------------------------------------------------------------
# Figures.


def unknown_summary() -> dict:
    """Every /summary figure of the schema, unknown: NaN, "" for a text, -1 for a step."""
    return {f["name"]: "" if f["dtype"] == "string" else -1 if f["name"].endswith("_step") else math.nan
            for f in summary_figures()}


def _column(table: pd.DataFrame, name: str) -> np.ndarray:
    if name in table:
        return table[name].to_numpy(dtype=np.float64)
    return np.full(len(table), np.nan)


def _per_rank_stat(rank_steps: list, name: str, fn) -> float:
    """fn over every value of the 2-D dataset `name` of the tables in `rank_steps` ({name: (rows, world)} each);
    NaN when none has it."""
    arrays = [table[name].ravel() for table in rank_steps if table.get(name) is not None]
    values = np.concatenate(arrays) if arrays else np.zeros(0)
    return float(fn(values)) if values.size else math.nan


def extra_figures(run: Run) -> dict:
    """Figures the card shows that /summary does not hold: mean GPU power (over the rows and ranks of every file
    of the run), last train loss, last epoch, the examples of the last evaluation, and the median step time beside
    the step-time model's prediction (the run file's predicted_step_time_s; their ratio, measured over
    predicted)."""
    loss = _column(run.steps, "loss")
    finite_loss = loss[np.isfinite(loss)]
    step_times = _column(run.steps, "step_time_s")
    step_times = step_times[np.isfinite(step_times)]
    median_step = float(np.median(step_times)) if step_times.size else math.nan
    predicted = float(run.attrs.get("predicted_step_time_s", math.nan))
    return {
        "median_step_time_s": median_step,
        "step_time_vs_predicted": median_step / predicted if predicted > 0 else math.nan,
        "mean_gpu_power_w": _per_rank_stat([a.rank_steps for a in run.attempts] or [run.rank_steps], "gpu_power_w",
                                           np.mean),
        "last_train_loss": float(finite_loss[-1]) if finite_loss.size else math.nan,
        "last_epoch": float(run.steps["epoch"].iloc[-1]) if len(run.steps) and "epoch" in run.steps else math.nan,
        "eval_examples": (float(run.evals["num_examples"].iloc[-1]) if len(run.evals) and "num_examples" in run.evals
                          else math.nan),
    }


def cpu_only(device_names) -> bool:
    """Whether a run's device_names attribute ("cpu,cpu,...") names CPU ranks only: the run had no GPU."""
    return {d.strip() for d in str(device_names).split(",") if d.strip()} == {"cpu"}


def metric_label(metric: str) -> str:
    """The name users know a metric by: the eval loss is "eval_loss" (the train loss is "loss" in /steps)."""
    return "eval_loss" if metric == "loss" else metric


def choose_metric(requested, runs_table) -> str | None:
    """The eval metric to report: `requested` ("eval_loss" or "loss", "rougeL", "f1", ...), or with None or
    "auto" the first of EVAL_METRICS that some run measured (None when no run has an evaluation).
    Raises ValueError for a name that is not an eval metric."""
    if requested in (None, "", "auto"):
        for m in EVAL_METRICS:
            column = f"best_{m}"
            if column in runs_table and np.isfinite(runs_table[column].astype(float)).any():
                return m
        return None
    name = requested.removeprefix("eval_")
    if name not in EVAL_METRICS:
        known = ", ".join(metric_label(m) for m in EVAL_METRICS)
        raise ValueError(f"unknown metric {requested!r}: choose one of {known}")
    return name


def rank_series(run: Run, name: str, reduce: str) -> np.ndarray:
    """A per-rank /steps column reduced over the ranks ("max" or "sum", NaN where no rank measured), one value per
    row of run.steps: the attempts' rows in order (a run resumed on another grid had another world size). All NaN
    when the files do not hold the column or their rows do not line up with the run's."""
    parts = []
    for attempt in run.attempts:
        values = attempt.rank_steps.get(name)
        if values is None:
            return np.full(len(run.steps), np.nan)
        values = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
        measured = np.isfinite(values).any(axis=1)
        fn = np.nanmax if reduce == "max" else np.nansum
        reduced = np.full(len(values), np.nan)
        if measured.any():
            reduced[measured] = fn(values[measured], axis=1)
        parts.append(reduced)
    joined = np.concatenate(parts) if parts else np.empty(0)
    return joined if len(joined) == len(run.steps) else np.full(len(run.steps), np.nan)


def generations_path(run_path) -> Path:
    """The generations file the trainer writes beside run file <name>.h5: <name>.eval.jsonl."""
    path = Path(run_path)
    return path.with_name(path.name[:-len(".h5")] + ".eval.jsonl" if path.name.endswith(".h5")
                          else path.name + ".eval.jsonl")


def generations_by_step(run: Run, per_step: int = 5) -> dict:
    """{step: the first `per_step` generations (by example index) of that evaluation, as rows of {index, source,
    prediction, reference}} from the run's generations file ({} without one). Lines that do not parse (a job
    killed while writing one) are passed over; an example generated twice at one step (the step evaluated again
    after a resume) is the later line's."""
    path = generations_path(run.path)
    if not path.is_file():
        return {}
    by_step = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                row = json.loads(line)
                by_step.setdefault(int(row["step"]), {})[int(row.get("index", 0))] = row
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
    return {step: [rows[i] for i in sorted(rows)[:per_step]] for step, rows in sorted(by_step.items())}


def last_generations(run: Run, count: int = 5) -> tuple:
    """(step, rows) of the run's last evaluation that wrote generations; (None, []) without any."""
    by_step = generations_by_step(run, count)
    if not by_step:
        return None, []
    step = max(by_step)
    return step, by_step[step]
