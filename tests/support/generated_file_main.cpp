// t5scale-generated-file: prints a file the project checks in and code generates, or writes it to the path given
// (through a temporary name, then renamed):
//   config-reference  jobs/CONFIG_REFERENCE.md, from the key registry (unit.config_reference keeps it current)
//   run-file-schema   analysis/t5scale_analyze/run_file_schema.json, from the run file's tables
//                     (unit.telemetry_run_file_schema keeps it current)
// `cmake --build <build> --target update_config_reference` (or update_run_file_schema) runs it on the file.
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>

#include "config/run_config.h"
#include "telemetry/run_file.h"

namespace {

constexpr char kUsage[] =
    "usage: t5scale-generated-file config-reference|run-file-schema [OUT]   (no OUT: print to standard output)\n";

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string what = argc > 1 ? argv[1] : "";
    if (what == "--help" || what == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (argc < 2 || argc > 3 || (what != "config-reference" && what != "run-file-schema")) {
      std::cerr << kUsage;
      return 2;
    }
    const std::string text =
        what == "config-reference" ? t5scale::config_reference_markdown() : t5scale::run_file_schema_json();
    if (argc == 2) {
      std::cout << text;
      return 0;
    }
    const std::string out = argv[2];
    const std::string temporary = out + ".tmp";
    {
      std::ofstream file(temporary, std::ios::binary);
      file << text;
      if (!file.flush()) throw std::runtime_error("cannot write " + temporary);
    }
    if (std::rename(temporary.c_str(), out.c_str()) != 0) throw std::runtime_error("cannot rename " + temporary);
    std::cout << "wrote " << out << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "t5scale-generated-file: error: " << e.what() << "\n";
    return 1;
  }
}
