// The note a rank leaves beside the run file when it goes down and cannot write the run file itself
// (<run>.failed.json: rank, host, step, error, time). Its space is reserved when the run starts (a file of
// kReservedBytes with its blocks allocated), so that a full disk cannot stop it; it is written whole into that
// space and then linked to its final name, so that a reader sees a whole note or none, and the first failing rank's
// note stays.
#pragma once

#include <cstdint>
#include <string>

namespace t5scale {

class ReservedFailureNote {
 public:
  static constexpr int64_t kReservedBytes = 64 * 1024;

  // Reserves <final_path>.reserve.<rank>; throws naming it when the space cannot be had.
  ReservedFailureNote(std::string final_path, int rank);
  ~ReservedFailureNote();  // gives the reserved space back, unless the note was published
  ReservedFailureNote(const ReservedFailureNote&) = delete;
  ReservedFailureNote& operator=(const ReservedFailureNote&) = delete;

  // Writes `text` (cut to the reserved size) into the reserved space and links it to the final name; false when
  // another rank's note is there already. Throws naming the file when it cannot be written.
  bool publish(const std::string& text);

  const std::string& final_path() const { return final_path_; }

  // Removes the reserved space of every rank for the note `final_path`: when a job starts (what killed ranks of an
  // earlier attempt left), and when it goes down through an abort, whose other ranks are killed before they can
  // give theirs back. A rank whose space is gone publishes nothing (publish returns false): the job's failure is
  // on record already.
  static void give_back_every_ranks_space(const std::string& final_path);

 private:
  std::string final_path_, reserve_path_;
  int fd_ = -1;
  bool published_ = false;
};

}  // namespace t5scale
