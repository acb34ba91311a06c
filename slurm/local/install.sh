#!/bin/bash
# Installs Debian's slurm-wlm and munge when any of their programs is missing (about 10 s; scripts/setup.sh
# installs them too), for the tests that start the local cluster. Needs root and the package archive.
set -uo pipefail
if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null &&
   command -v sbatch >/dev/null; then
  exit 0
fi
echo "installing slurm-wlm and munge"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y slurm-wlm munge >/dev/null ||
  { apt-get update >/dev/null && apt-get install -y slurm-wlm munge >/dev/null; } ||
  { echo "apt-get install slurm-wlm munge failed" >&2; exit 1; }
