"""Runs the reference makers: the Python scripts that write, with someone else's implementation (transformers,
rouge-score, SentencePiece), what the C++ tests compare against. torch and transformers are imported once, here;
each maker then runs in a child forked from this interpreter, one at a time, as if it had been started alone: its
own sys.argv, its script's folder first on sys.path, its own seeds, thread count and deterministic-algorithm
switches (a child's globals end with it). Importing transformers' T5 costs about 4 CPU seconds, which separate
interpreters paid once per maker.

usage: make_python_references.py -- SCRIPT [ARG...] [-- SCRIPT [ARG...]]...

Each maker is named with its time and exit status; the exit status is 0 when every maker exited 0, else 1.
"""

import importlib
import os
import runpy
import sys
import time
import traceback

# What most makers import and what costs the most to import; a module missing here is the makers' own error.
PRELOADED = ("torch", "transformers", "transformers.models.t5.modeling_t5", "transformers.optimization",
             "safetensors.torch", "sentencepiece")


def makers(words):
    """The commands between the `--` separators."""
    if not words or words[0] != "--":
        sys.exit(__doc__)
    commands = []
    for word in words:
        if word == "--":
            commands.append([])
        else:
            commands[-1].append(word)
    if any(not command for command in commands):
        sys.exit(__doc__)
    return commands


def run_maker(command):
    """The exit status of one maker, run in a forked child as `python SCRIPT ARG...` would run it."""
    script = os.path.abspath(command[0])
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            sys.argv = [script, *command[1:]]
            sys.path.insert(0, os.path.dirname(script))
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exit_request:  # as the interpreter ends on it: a message goes to stderr, status 1
            if exit_request.code is None or isinstance(exit_request.code, int):
                code = exit_request.code or 0
            else:
                print(exit_request.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001  (the child reports everything and ends here, never in the parent's code)
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def main():
    commands = makers(sys.argv[1:])
    start = time.monotonic()
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    print(f"[references] imported {', '.join(PRELOADED)} in {time.monotonic() - start:.1f} s", flush=True)
    failed = []
    for command in commands:
        began = time.monotonic()
        print(f"[references] {' '.join(command)}", flush=True)
        code = run_maker(command)
        print(f"[references] {os.path.basename(command[0])}: exit {code} after {time.monotonic() - began:.1f} s",
              flush=True)
        if code != 0:
            failed.append(f"{command[0]} (exit {code})")
    if failed:
        sys.exit("[references] failed: " + "; ".join(failed))
    print(f"[references] {len(commands)} makers in {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main()
