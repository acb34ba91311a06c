# Run at every build (target t5scale_git_revision): writes OUT with the checkout's revision, "-dirty" when tracked
# files differ from it, and rewrites it only when that changes, so that only the files that include it recompile.
#   cmake -DSOURCE_DIR=... -DOUT=.../t5scale_git_revision.h -P write_git_revision.cmake
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=12 HEAD OUTPUT_VARIABLE revision
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE not_git)
if(not_git OR NOT revision)
  set(revision unknown)
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" diff --quiet HEAD -- RESULT_VARIABLE changed ERROR_QUIET)
  if(changed)
    string(APPEND revision "-dirty")
  endif()
endif()
set(text "// Written by cmake/write_git_revision.cmake at build time.\n#pragma once\n#define T5SCALE_GIT_REVISION \"${revision}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
