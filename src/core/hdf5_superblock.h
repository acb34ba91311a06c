// What an HDF5 file's superblock says cheaply about the file's health, read before HDF5 itself opens it.
//
// HDF5 compares the end of file recorded in the superblock with the file's size only when a file is opened without
// SWMR. Opened with SWMR read (as a run file must be, to read a live job's or a killed job's), a truncated file makes
// the library retry its metadata reads with growing sleeps, for minutes, and a job resuming onto it waits with every
// other rank blocked in a collective. So every reader of run files asks this first: a file shorter than the end its
// superblock records is truncated. A file longer than it is fine: a SWMR writer updates the recorded end at its
// flushes, after the data (analysis/t5scale_analyze/runfile.py does the same in Python).
#pragma once

#include <hdf5.h>

#include <string>

namespace t5scale {

struct Hdf5SuperblockCheck {
  std::string damage;        // why the file cannot be read safely, "" when nothing shows
  bool swmr_writer = false;  // a writer had it open in SWMR mode (a live job, or one killed before it closed it)
};

// Reads the superblock (at byte 0, 512, 1024, 2048, ...). A file that is missing or unreadable gives `damage` with the
// system's reason. Where a SWMR writer has the file and it is short, the size is looked at once more after half a
// second (the writer may be extending it) before it is called truncated.
Hdf5SuperblockCheck check_hdf5_superblock(const std::string& path);

// A SWMR reader retries a metadata read whose checksum fails, for a writer that may be in the middle of writing it:
// 100 times by default, with growing sleeps, which on a file damaged inside (a flipped byte in an object header)
// is minutes of waiting. 10 attempts answer such a file in milliseconds and still outlast a writer's update of a
// block. Sets that limit on the file access list `fapl` (analysis/t5scale_analyze/runfile.py sets the same).
constexpr unsigned kSwmrMetadataReadAttempts = 10;
void limit_swmr_read_attempts(hid_t fapl, const std::string& path);

}  // namespace t5scale
