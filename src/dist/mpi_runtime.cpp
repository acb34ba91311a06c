#include "dist/mpi_runtime.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "core/command_line.h"
#include "dist/peer_liveness.h"

namespace t5scale {
namespace {

// A duplicate of MPI_COMM_WORLD for the failure messages of abort_job, so they never match a job's own messages.
MPI_Comm failure_comm = MPI_COMM_NULL;
std::function<void(const std::string&)> failure_recorder;
std::vector<std::string> gathered_world_hosts;  // world_hosts()

constexpr int kFailureTag = 7;  // rank 0's message to the others
constexpr int kAnswerTag = 8;   // a rank's answer: it has printed its own message, or has none to print
// What the answer says besides: whether the rank can end with MPI_Finalize (it is failing on the thread that
// initialised MPI, which the standard asks of MPI_Finalize; a collective's timeout may be met on another thread).
constexpr char kCanFinalize = 1;
constexpr char kCannotFinalize = 2;
constexpr int kEndTag = 9;      // rank 0 to the others: every rank is failing, end cleanly
// How long another rank waits for rank 0's message: ranks meet a start-up error within seconds of each other.
constexpr double kWaitForRankZeroS = 5.0;
// How long rank 0 waits for the answers before the abort (a rank that is not failing never answers): long enough
// for a rank whose own error differs to print it before the abort kills it.
constexpr double kWaitForAnswersS = 2.0;
// How long a rank that has answered rank 0 waits for rank 0's word to end cleanly, or for its abort.
constexpr double kAbortGraceS = 10.0;
// How long a clean end may take (MPI_Finalize waits for every rank) before the process ends without it.
constexpr double kFinalizeLimitS = 30.0;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool mpi_usable() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

// Polls the requests until all are done or `limit_s` has passed (a stalled rank never completes its part).
void wait_at_most(std::vector<MPI_Request>& requests, double limit_s) {
  const auto start = std::chrono::steady_clock::now();
  int done = 0;
  while (!requests.empty() && seconds_since(start) < limit_s) {
    MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (done) return;
    answer_liveness_pings();  // a rank whose collective timed out may be asking who is still there
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

bool on_main_thread() {
  int main_thread = 0;
  MPI_Is_thread_main(&main_thread);
  return main_thread != 0;
}

// Rank 0: sends `message` to every other rank and waits a little for their answers. Returns whether every rank
// answered that it can end with MPI_Finalize (so every rank is in abort_job).
bool tell_other_ranks(const std::string& message, int world_size) {
  std::vector<MPI_Request> sends, receives;
  std::vector<char> answers(static_cast<size_t>(world_size));
  for (int r = 1; r < world_size; ++r) {
    sends.emplace_back();
    MPI_Isend(message.data(), static_cast<int>(message.size()), MPI_CHAR, r, kFailureTag, failure_comm,
              &sends.back());
    receives.emplace_back();
    MPI_Irecv(&answers[static_cast<size_t>(r)], 1, MPI_CHAR, r, kAnswerTag, failure_comm, &receives.back());
  }
  wait_at_most(receives, kWaitForAnswersS);
  int all_answered = 0;
  MPI_Testall(static_cast<int>(receives.size()), receives.data(), &all_answered, MPI_STATUSES_IGNORE);
  if (!all_answered) return false;
  wait_at_most(sends, kWaitForAnswersS);  // each rank answered, so each has received its message
  for (int r = 1; r < world_size; ++r) {
    if (answers[static_cast<size_t>(r)] != kCanFinalize) return false;
  }
  return true;
}

// Rank 0, once every rank has answered: tells each to end cleanly.
void tell_other_ranks_to_end(int world_size) {
  const char end = 1;
  std::vector<MPI_Request> requests(static_cast<size_t>(world_size - 1));
  for (int r = 1; r < world_size; ++r) {
    MPI_Isend(&end, 1, MPI_CHAR, r, kEndTag, failure_comm, &requests[static_cast<size_t>(r - 1)]);
  }
  wait_at_most(requests, kWaitForAnswersS);
}

// Another rank, after its answer: whether rank 0 says to end cleanly within kAbortGraceS (else its abort comes, or
// this rank's own).
bool rank_zero_says_end() {
  const auto start = std::chrono::steady_clock::now();
  while (seconds_since(start) < kAbortGraceS) {
    int arrived = 0;
    MPI_Iprobe(0, kEndTag, failure_comm, &arrived, MPI_STATUS_IGNORE);
    if (arrived) {
      char end = 0;
      MPI_Recv(&end, 1, MPI_CHAR, 0, kEndTag, failure_comm, MPI_STATUS_IGNORE);
      return true;
    }
    answer_liveness_pings();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Every rank is failing: nobody is left to take down, so the job ends as a job that finished does, with the exit
// code and without MPI_Abort. MPI_Abort would add Open MPI's banner to the message that already says what is
// wrong, and with mpirun, as rank 0's banner races the ranks being killed, often "ORTE_ERROR_LOG: Data unpack would
// read past end of buffer ... show_help.c" in its place; under srun, the step's cancellation lines. Should
// MPI_Finalize not return (a peer lost meanwhile), the process ends without it.
[[noreturn]] void end_every_rank_cleanly(int exit_code) {
  std::fflush(nullptr);
  std::thread([exit_code] {
    std::this_thread::sleep_for(std::chrono::duration<double>(kFinalizeLimitS));
    std::_Exit(exit_code);
  }).detach();
  stop_peer_liveness();
  MPI_Finalize();
  std::_Exit(exit_code);
}

// Another rank: whether rank 0's message came within kWaitForRankZeroS, and its text.
bool message_of_rank_zero(std::string* text) {
  const auto start = std::chrono::steady_clock::now();
  while (seconds_since(start) < kWaitForRankZeroS) {
    int arrived = 0;
    MPI_Status status;
    MPI_Iprobe(0, kFailureTag, failure_comm, &arrived, &status);
    if (arrived) {
      int length = 0;
      MPI_Get_count(&status, MPI_CHAR, &length);
      text->assign(static_cast<size_t>(length), '\0');
      MPI_Recv(text->data(), length, MPI_CHAR, 0, kFailureTag, failure_comm, MPI_STATUS_IGNORE);
      return true;
    }
    answer_liveness_pings();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void answer_rank_zero() {
  const char answer = on_main_thread() ? kCanFinalize : kCannotFinalize;
  std::vector<MPI_Request> request(1);
  MPI_Isend(&answer, 1, MPI_CHAR, 0, kAnswerTag, failure_comm, &request[0]);
  wait_at_most(request, kWaitForAnswersS);
}

}  // namespace

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  // Gradient hooks may issue collectives from autograd's worker threads, one at a time.
  T5S_CHECK(provided >= MPI_THREAD_SERIALIZED, "the MPI library offers thread level ", provided,
            "; t5scale needs at least MPI_THREAD_SERIALIZED");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &failure_comm));
  MPI_Comm_set_errhandler(failure_comm, MPI_ERRORS_RETURN);
  world_hosts();
  start_peer_liveness();
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (failure_comm != MPI_COMM_NULL) MPI_Comm_free(&failure_comm);
  stop_peer_liveness();
  MPI_Finalize();
}

int rank_in(MPI_Comm comm) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  return rank;
}

int size_of(MPI_Comm comm) {
  int size = 0;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  return size;
}

int world_rank() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void set_failure_recorder(std::function<void(const std::string& message)> recorder) {
  failure_recorder = std::move(recorder);
}

void abort_job(const std::string& program, const std::string& message, int exit_code) {
  // Taken out first: a failure inside the recorder comes back here and must not record again.
  if (auto recorder = std::move(failure_recorder)) {
    failure_recorder = nullptr;
    try {
      recorder(message);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[rank %d] %s: could not record the failure: %s\n", world_rank(), program.c_str(), e.what());
    }
  }
  const int rank = world_rank();
  int world_size = 1;
  const bool usable = mpi_usable() && failure_comm != MPI_COMM_NULL;
  if (usable) MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  std::string rank_zero_message;
  const bool rank_zero_spoke = usable && rank != 0 && message_of_rank_zero(&rank_zero_message);
  const bool print = !rank_zero_spoke || rank_zero_message != message;
  if (print) {
    std::fprintf(stderr, "[rank %d] %s: error: %s\n", rank, program.c_str(), message.c_str());
    std::fflush(stderr);
  }
  // Where every rank is failing (the common case: an input every rank refuses), each ends cleanly with the exit
  // code; where some rank is not (a rank that stalled, or is still computing) or one failed off the main thread,
  // rank 0 aborts the job. A rank that answered rank 0 waits for its word; should neither the word nor rank 0's
  // abort come, this rank aborts.
  if (rank_zero_spoke) {
    answer_rank_zero();
    if (rank_zero_says_end()) end_every_rank_cleanly(exit_code);
  }
  if (usable && rank == 0 && world_size > 1 && tell_other_ranks(message, world_size) && on_main_thread()) {
    tell_other_ranks_to_end(world_size);
    end_every_rank_cleanly(exit_code);
  }
  if (usable && world_size == 1) end_every_rank_cleanly(exit_code);  // one process: nobody to take down
  if (mpi_usable()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

int run_mpi_program(int argc, char** argv, const std::string& program, const std::function<int(int, char**)>& body) {
  // The handler must run while MPI is still initialised: unwinding through the runtime's destructor would call
  // MPI_Finalize, which waits for the other ranks, and the abort would never come.
  std::unique_ptr<MpiRuntime> mpi;
  int code = 0;
  try {
    mpi = std::make_unique<MpiRuntime>(&argc, &argv);
    code = body(argc, argv);  // the same on every rank: an agreed ending (e.g. preempted), not a failure
  } catch (const std::exception& e) {
    print_debug_text(program.c_str(), e);
    abort_job(program, user_message(e));
  }
  mpi.reset();
  return code;
}

void sleeping_barrier(MPI_Comm comm, std::chrono::microseconds poll) {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ibarrier(comm, &request));
  for (int done = 0;;) {
    MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(poll);
  }
}

std::vector<std::string> all_gather_strings(MPI_Comm comm, const std::string& mine) {
  int size = 1;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(size);
  MPI_CHECK(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm));
  std::vector<int> offsets(size, 0);
  for (int r = 1; r < size; ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
  std::string all(static_cast<size_t>(offsets.back() + lengths.back()), '\0');
  MPI_CHECK(MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, comm));
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) out.push_back(all.substr(offsets[r], lengths[r]));
  return out;
}

const std::vector<std::string>& world_hosts() {
  if (gathered_world_hosts.empty()) {
    char host[MPI_MAX_PROCESSOR_NAME] = {};
    int length = 0;
    MPI_CHECK(MPI_Get_processor_name(host, &length));
    gathered_world_hosts = all_gather_strings(MPI_COMM_WORLD, std::string(host, static_cast<size_t>(length)));
  }
  return gathered_world_hosts;
}

std::string host_of_world_rank(int rank) {
  return rank >= 0 && static_cast<size_t>(rank) < gathered_world_hosts.size()
             ? gathered_world_hosts[static_cast<size_t>(rank)]
             : "?";
}

}  // namespace t5scale
