#include "core/end_process.h"

#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace t5scale {

void end_process(int exit_code) {
  std::cout.flush();
  std::cerr.flush();
  std::clog.flush();
  std::fflush(nullptr);
  H5close();  // what an atexit handler of HDF5's would do: files left open are flushed and closed
  std::_Exit(exit_code);
}

}  // namespace t5scale
