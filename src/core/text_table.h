// Plain-text tables for the programs' reports: columns padded to their widest cell, two spaces apart.
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace t5scale {

// The header and the rows, one line each; the columns in `left` aligned left, the others right; no trailing blanks.
inline std::string text_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                              const std::set<size_t>& left) {
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) {
    width[i] = header[i].size();
    for (const auto& row : rows) width[i] = std::max(width[i], row[i].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::string pad(width[i] - cells[i].size(), ' ');
      out += (i ? "  " : "") + (left.count(i) ? cells[i] + pad : pad + cells[i]);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(header);
  for (const auto& row : rows) out += line(row);
  return out;
}

}  // namespace t5scale
