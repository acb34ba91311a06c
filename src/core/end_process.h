// How a program's main ends: with its exit code, without the destructors of static objects. LibTorch's take
// 0.2 s of CPU in every process that links it (they deregister its operators one by one, and the CUDA
// libraries' unload), about a fifth of a short command's whole cost, paid 400 times by the test suite. Nothing
// of ours needs them: what main wrote is closed by then, and end_process flushes what may still be buffered.
#pragma once

namespace t5scale {

// Flushes the C and C++ standard streams and the HDF5 library (any file still open is flushed and closed), then
// ends the process with `exit_code`, skipping atexit handlers and static destructors.
[[noreturn]] void end_process(int exit_code);

}  // namespace t5scale
