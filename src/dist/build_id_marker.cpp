// The marker of the build id (dist/build_id.h), compiled into the programs (through the dist part) and into the CUDA
// backend's library: the text "T5SCALE-BUILD-ID:" followed by the id, kept by the linker although nothing reads it
// as a symbol, and found by reading the file.
#include "t5scale_git_revision.h"  // generated at build time: T5SCALE_GIT_REVISION

extern "C" __attribute__((used, visibility("hidden"))) const char t5scale_build_id_marker[] =
    "T5SCALE-BUILD-ID:" T5SCALE_GIT_REVISION "/" T5SCALE_BUILD_TOKEN;
