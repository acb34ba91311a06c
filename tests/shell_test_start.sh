# The start of a shell test that takes SOURCE_DIR BIN_DIR PYTHON (sourced: `. shell_test_start.sh "$@"`): sets
# src, bin and python, test_start, and `step`, the step the test is at, which fail names in its message.

if [ $# -ne 3 ]; then
  echo "usage: $0 SOURCE_DIR BIN_DIR PYTHON" >&2
  exit 2
fi
src=$(realpath "$1")
bin=$(realpath "$2")
python=$3
test_start=$SECONDS

step="checking the prerequisites"
fail() {
  echo "FAIL ($step): $*" >&2
  exit 1
}
