// Preemption: Slurm sends SIGTERM before it kills a job (and SIGUSR1 when asked with `--signal=USR1@<s>`). The
// handler only records the signal; the training loop asks every rank at the next step boundary (one max-reduce),
// so all ranks checkpoint the same step, flush the run file, and exit with kRequeueExitCode, on which the sbatch
// scripts requeue the job.
#pragma once

namespace t5scale {

// EX_TEMPFAIL from sysexits.h: "try again later". The sbatch scripts requeue on it.
constexpr int kRequeueExitCode = 75;

// Installs the handlers for SIGTERM and SIGUSR1 (idempotent).
void install_preemption_handlers();
// The signal received since the handlers were installed (SIGTERM or SIGUSR1), or 0.
int preemption_signal();
// For tests: behave as if `signal_number` had arrived.
void request_preemption(int signal_number);

}  // namespace t5scale
