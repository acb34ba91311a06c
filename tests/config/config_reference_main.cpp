// t5scale-config-reference: prints the run config reference (Markdown, from the key registry), or writes it to
// the file given (through a temporary name, then renamed). `cmake --build <build> --target
// update_config_reference` runs it on jobs/CONFIG_REFERENCE.md, which unit.config_reference keeps current.
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>

#include "config/run_config.h"

int main(int argc, char** argv) {
  try {
    const std::string text = t5scale::config_reference_markdown();
    if (argc == 1) {
      std::cout << text;
      return 0;
    }
    const std::string arg = argv[1];
    if (argc != 2 || arg == "--help" || arg == "-h") {
      std::cerr << "usage: t5scale-config-reference [OUT.md]   (no argument: print to standard output)\n";
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
    const std::string temporary = arg + ".tmp";
    {
      std::ofstream out(temporary, std::ios::binary);
      out << text;
      if (!out.flush()) throw std::runtime_error("cannot write " + temporary);
    }
    if (std::rename(temporary.c_str(), arg.c_str()) != 0) throw std::runtime_error("cannot rename " + temporary);
    std::cout << "wrote " << arg << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "t5scale-config-reference: error: " << e.what() << "\n";
    return 1;
  }
}
