#!/usr/bin/env bash
# check_entry_point.sh PYTHON PROJECT_VERSION
# The t5scale-analyze command that scripts/setup.sh installs into the virtual environment of PYTHON (beside it in
# bin/), run as a user runs it, without PYTHONPATH: --help exits 0 with the usage, a folder that does not exist
# exits 2 with the error (main's return value is the exit status), and the installed package's version is the
# project's.
set -uo pipefail
python=$1
project_version=$2
command="$(dirname "$python")/t5scale-analyze"
fail() { echo "FAIL: $*" >&2; exit 1; }

[[ -x $command ]] || fail "$command is missing: scripts/setup.sh installs it (analysis/pyproject.toml)"
unset PYTHONPATH

out=$("$command" --help 2>&1)
rc=$?
[[ $rc -eq 0 ]] || fail "t5scale-analyze --help exited $rc: $out"
[[ $out == "usage: t5scale-analyze "* && $out == *RESULTS_DIR*--out*--metric*--cards-only* ]] ||
  fail "t5scale-analyze --help printed no usage: $out"

out=$("$command" no-such-folder 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"RESULTS_DIR 'no-such-folder' is not a folder"* ]] ||
  fail "t5scale-analyze no-such-folder exited $rc (expected 2): $out"

installed=$("$python" -c 'import importlib.metadata as m; print(m.version("t5scale-analyze"))') ||
  fail "no t5scale-analyze distribution in $python's environment"
[[ $installed == "$project_version" ]] ||
  fail "installed t5scale-analyze $installed, project version $project_version (analysis/pyproject.toml)"
echo "t5scale-analyze $installed: $command"
