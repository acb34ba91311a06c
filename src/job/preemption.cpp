#include "job/preemption.h"

#include <csignal>

namespace t5scale {
namespace {

// sig_atomic_t is what a signal handler may write; the loop polls it once per step.
volatile std::sig_atomic_t received_signal = 0;

extern "C" void record_signal(int signal_number) { received_signal = signal_number; }

}  // namespace

void install_preemption_handlers() {
  struct sigaction action {};
  action.sa_handler = record_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking calls (file writes, MPI polling) go on; the loop checks the flag
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

int preemption_signal() { return received_signal; }

void request_preemption(int signal_number) { received_signal = signal_number; }

}  // namespace t5scale
