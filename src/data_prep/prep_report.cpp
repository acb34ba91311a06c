#include "data_prep/prep_report.h"

#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

namespace t5scale {

std::string format_prep_report(const PrepResult& result) {
  std::ostringstream out;
  out << "t5scale-prep: wrote " << result.out_path << "\n";
  out << "  tokenizer " << result.tokenizer_file << " (sha256 " << result.tokenizer_sha256 << ", vocab_size "
      << result.vocab_size << ")";
  if (!result.added_tokens.empty()) {
    out << ", added tokens:";
    for (const std::string& token : result.added_tokens) out << " " << token;
  }
  out << "\n  splits: " << result.split_rule << "\n";
  for (const std::string& warning : result.warnings) out << "  warning: " << warning << "\n";
  out << "  " << std::left << std::setw(12) << "split" << std::right << std::setw(10) << "examples" << std::setw(13)
      << "src tokens" << std::setw(13) << "tgt tokens"
      << "  src len p50/p90/p99/max  tgt len p50/p90/p99/max"
      << "  truncated src/tgt  skipped malformed/missing/empty/utf8/label\n";
  for (const auto& [name, s] : result.splits) {
    std::ostringstream source, target, truncated, skipped;
    source << s.source_length_p50 << "/" << s.source_length_p90 << "/" << s.source_length_p99 << "/"
           << s.source_length_max;
    target << s.target_length_p50 << "/" << s.target_length_p90 << "/" << s.target_length_p99 << "/"
           << s.target_length_max;
    truncated << s.truncated_sources << "/" << s.truncated_targets;
    skipped << s.skipped_malformed << "/" << s.skipped_missing_field << "/" << s.skipped_empty_target << "/"
            << s.skipped_invalid_utf8 << "/" << s.skipped_unknown_label;
    out << "  " << std::left << std::setw(12) << name << std::right << std::setw(10) << s.num_examples << std::setw(13)
        << s.num_source_tokens << std::setw(13) << s.num_target_tokens << std::setw(25) << source.str() << std::setw(25)
        << target.str() << std::setw(19) << truncated.str() << std::setw(42) << skipped.str() << "\n";
  }
  out << std::fixed << std::setprecision(2);
  if (result.tokenizer_training_s > 0) out << "  tokenizer training: " << result.tokenizer_training_s << " s\n";
  out << "  read " << result.input_bytes / 1e6 << " MB, " << result.records << " records, " << result.examples
      << " examples in " << result.tokenize_s << " s with " << result.threads
      << " tokenizer thread(s): " << result.megabytes_per_s() << " MB/s, " << std::setprecision(0)
      << result.examples_per_s() << " examples/s\n";
  return out.str();
}

std::string prep_report_json(const PrepResult& result) {
  nlohmann::json report;
  report["out"] = result.out_path;
  report["tokenizer_file"] = result.tokenizer_file;
  report["tokenizer_sha256"] = result.tokenizer_sha256;
  report["vocab_size"] = result.vocab_size;
  report["added_tokens"] = result.added_tokens;
  report["split_rule"] = result.split_rule;
  report["warnings"] = result.warnings;
  report["input_bytes"] = result.input_bytes;
  report["records"] = result.records;
  report["examples"] = result.examples;
  report["threads"] = result.threads;
  report["tokenizer_training_s"] = result.tokenizer_training_s;
  report["tokenize_s"] = result.tokenize_s;
  report["megabytes_per_s"] = result.megabytes_per_s();
  report["examples_per_s"] = result.examples_per_s();
  for (const auto& [name, s] : result.splits) {
    report["splits"][name] = {{"num_examples", s.num_examples},
                              {"num_source_tokens", s.num_source_tokens},
                              {"num_target_tokens", s.num_target_tokens},
                              {"source_length_p50", s.source_length_p50},
                              {"source_length_p90", s.source_length_p90},
                              {"source_length_p99", s.source_length_p99},
                              {"source_length_max", s.source_length_max},
                              {"target_length_p50", s.target_length_p50},
                              {"target_length_p90", s.target_length_p90},
                              {"target_length_p99", s.target_length_p99},
                              {"target_length_max", s.target_length_max},
                              {"truncated_sources", s.truncated_sources},
                              {"truncated_targets", s.truncated_targets},
                              {"skipped_malformed", s.skipped_malformed},
                              {"skipped_missing_field", s.skipped_missing_field},
                              {"skipped_empty_target", s.skipped_empty_target},
                              {"skipped_invalid_utf8", s.skipped_invalid_utf8},
                              {"skipped_unknown_label", s.skipped_unknown_label}};
  }
  return report.dump(2);
}

}  // namespace t5scale
