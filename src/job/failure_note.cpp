#include "job/failure_note.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace t5scale {

ReservedFailureNote::ReservedFailureNote(std::string final_path, int rank)
    : final_path_(std::move(final_path)), reserve_path_(msg(final_path_, ".reserve.", rank)) {
  fd_ = ::open(reserve_path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd_ < 0) {
    throw Error(msg("cannot reserve space for a failure note in '", reserve_path_, "': ", std::strerror(errno)));
  }
  // The blocks themselves, not a sparse size: writing into them later needs no free space.
  const int error = ::posix_fallocate(fd_, 0, kReservedBytes);
  if (error != 0) {
    ::close(fd_);
    ::unlink(reserve_path_.c_str());
    fd_ = -1;
    throw Error(msg("cannot reserve ", kReservedBytes, " bytes for a failure note in '", reserve_path_,
                    "': ", std::strerror(error), " (is the disk of run.output_dir full?)"));
  }
}

ReservedFailureNote::~ReservedFailureNote() {
  if (fd_ >= 0) ::close(fd_);
  ::unlink(reserve_path_.c_str());  // published: the note lives on under its final name
}

bool ReservedFailureNote::publish(const std::string& text) {
  T5S_CHECK(fd_ >= 0 && !published_, "the failure note '", final_path_, "' was published already");
  const std::string whole = text.substr(0, static_cast<size_t>(kReservedBytes));
  size_t done = 0;
  while (done < whole.size()) {
    const ssize_t wrote = ::pwrite(fd_, whole.data() + done, whole.size() - done, static_cast<off_t>(done));
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) throw Error(msg("cannot write the failure note '", reserve_path_, "': ", std::strerror(errno)));
    done += static_cast<size_t>(wrote);
  }
  if (::ftruncate(fd_, static_cast<off_t>(whole.size())) != 0 || ::fsync(fd_) != 0) {
    throw Error(msg("cannot complete the failure note '", reserve_path_, "': ", std::strerror(errno)));
  }
  published_ = true;
  // link() fails when a note is there already (the first failing rank's stays), or when the reservation was given
  // back by a rank that recorded the job's failure before this one.
  if (::link(reserve_path_.c_str(), final_path_.c_str()) != 0) {
    if (errno == EEXIST || errno == ENOENT) return false;
    throw Error(msg("cannot write the failure note '", final_path_, "': ", std::strerror(errno)));
  }
  return true;
}

void ReservedFailureNote::give_back_every_ranks_space(const std::string& final_path) {
  namespace fs = std::filesystem;
  const fs::path note(final_path);
  const fs::path folder = note.has_parent_path() ? note.parent_path() : fs::path(".");
  const std::string prefix = note.filename().string() + ".reserve.";
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) fs::remove(entry.path(), error);
  }
}

}  // namespace t5scale
