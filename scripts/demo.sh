#!/usr/bin/env bash
# The demo: installs what is missing, builds t5scale-train and trains a tiny T5 on the built-in synthetic task,
# printing a falling loss. Arguments go to t5scale-train (see build/bin/t5scale-train --help).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup.sh"
VENV=$(cat "${T5SCALE_CACHE:-$HOME/.cache/t5scale}/venv-path")
BUILD_DIR=${T5SCALE_BUILD_DIR:-$ROOT/build}
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DT5SCALE_PYTHON="$VENV/bin/python" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target t5scale-train
exec "$BUILD_DIR/bin/t5scale-train" "$@"
