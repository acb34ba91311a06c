// Models that transformers saved in the layouts t5scale reads besides a model.safetensors folder, loaded and compared
// with transformers' logits: a model named in a Hugging Face cache (HF_HUB_CACHE, refs/main's snapshot),
// pytorch_model.bin (tied embeddings), sharded pytorch_model.bin and a bfloat16 pytorch_model.bin. The fixtures are
// make_format_fixtures.py's, in $T5SCALE_FORMAT_DIR. Also, without Python: a state dict that LibTorch wrote in
// torch.save's format, and the files that cannot be read, refused naming the file.
#include <gtest/gtest.h>
#include <caffe2/serialize/inline_container.h>

#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "io/torch_state_dict.h"
#include "model/t5_model.h"
#include "support/test_support.h"

namespace t5scale {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

// The same bound as the parity with transformers (test_hf_parity.cpp): the weights are the same fp32 numbers, so
// what remains is the order of fp32 reductions.
constexpr double kFormatTolerance = 1e-5;

struct FormatCase {
  std::string name, kind, init_from;  // kind: "name" (in the cache) or "folder" (relative to the fixtures)
};

// The cases of $T5SCALE_FORMAT_DIR/cases.txt; without fixtures one case "fixtures_missing" fails with the reason.
std::vector<FormatCase> format_cases() {
  const char* dir = std::getenv("T5SCALE_FORMAT_DIR");
  std::ifstream in(dir ? fs::path(dir) / "cases.txt" : fs::path());
  if (!in) return {{"fixtures_missing", "", ""}};
  std::vector<FormatCase> found;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    FormatCase c;
    if (fields >> c.name >> c.kind >> c.init_from) found.push_back(c);
  }
  return found;
}

class HfFormats : public ::testing::TestWithParam<FormatCase> {};

TEST_P(HfFormats, LoadsWithTransformersLogits) {
  const FormatCase& c = GetParam();
  ASSERT_NE(c.name, "fixtures_missing")
      << "no format fixtures: set T5SCALE_FORMAT_DIR to the folder make_format_fixtures.py wrote (ctest does)";
  const fs::path dir = std::getenv("T5SCALE_FORMAT_DIR");
  const auto reference = SafetensorsFile::open((dir / c.name / "reference.safetensors").string());
  ASSERT_EQ(reference.metadata().at("format_version"), "1");
  std::cout << c.name << ": reference from transformers " << reference.metadata().at("transformers") << ", torch "
            << reference.metadata().at("torch") << "\n";
  const std::string init_from = c.kind == "name" ? c.init_from : (dir / c.init_from).string();
  if (c.kind == "name") ASSERT_NE(std::getenv("HF_HUB_CACHE"), nullptr) << "ctest sets HF_HUB_CACHE";
  T5Model model = load_hf_model(init_from, std::make_shared<SoloCommunicator>("tp"));
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = model->forward(reference.read("input_ids"), reference.read("attention_mask"),
                                              model->shift_right(reference.read("labels")));
  const auto check = testing::tensors_close(c.name + " logits", logits, reference.read("logits"), kFormatTolerance);
  std::cout << c.name << " (" << init_from << "): " << check.message() << "\n";
  EXPECT_TRUE(check);
}

INSTANTIATE_TEST_SUITE_P(Formats, HfFormats, ::testing::ValuesIn(format_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- torch.save files without Python ----

ModelConfig small_config() {
  ModelConfig c = tiny_model_config(40);
  c.num_layers = 2;
  c.num_decoder_layers = 1;
  return c;
}

// The model's tensors under Hugging Face's names, as a state dict torch.save would write (torch::pickle_save writes
// torch.save's zip format).
void write_state_dict(T5ModelImpl& model, const std::string& path) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& item : model.named_parameters()) dict.insert(hf_parameter_name(item.key()), item.value().detach());
  const std::vector<char> bytes = torch::pickle_save(dict);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(TorchStateDict, AStateDictInTorchSaveFormatLoadsAsPytorchModelBin) {
  TempDir dir;
  T5Model model(small_config(), std::make_shared<SoloCommunicator>("tp"));
  model->initialize_weights(5);
  export_hf_checkpoint(*model, dir / "hf");
  fs::remove(dir / "hf/model.safetensors");
  write_state_dict(*model, dir / "hf/pytorch_model.bin");
  const auto tensors = read_torch_state_dict(dir / "hf/pytorch_model.bin");
  EXPECT_EQ(tensors.size(), model->named_parameters().size());
  T5Model loaded = load_hf_model(dir / "hf", std::make_shared<SoloCommunicator>("tp"));
  auto original = model->named_parameters();
  for (const auto& item : loaded->named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value(), original[item.key()])) << item.key();
  }
}

// A state dict whose tensor record is cut short inside an intact zip archive (a copy interrupted and re-zipped, a
// damaged file) is refused naming the file and the tensor, however little is missing; a record longer than its
// tensor needs loads (torch.save may write a storage shared by several tensors).
TEST(TorchStateDict, ARecordCutShortIsRefusedNamingTheTensor) {
  TempDir dir;
  T5Model model(small_config(), std::make_shared<SoloCommunicator>("tp"));
  model->initialize_weights(5);
  write_state_dict(*model, dir / "whole.bin");
  caffe2::serialize::PyTorchStreamReader whole{dir / "whole.bin"};
  // The largest storage record, rewritten `cut` bytes shorter (or longer), every other record as it was.
  std::string largest;
  size_t largest_size = 0;
  for (const std::string& name : whole.getAllRecords()) {
    if (name.rfind("data/", 0) == 0 && whole.getRecordSize(name) > largest_size) {
      largest = name;
      largest_size = whole.getRecordSize(name);
    }
  }
  ASSERT_GT(largest_size, 1000u);
  auto rewrite = [&](const std::string& path, int64_t change) {
    caffe2::serialize::PyTorchStreamWriter writer{path};
    for (const std::string& name : whole.getAllRecords()) {
      if (name == ".data/version" || name == "version" || name == ".data/serialization_id") continue;
      auto [data, size] = whole.getRecord(name);
      std::string bytes(static_cast<const char*>(data.get()), size);
      if (name == largest) bytes.resize(static_cast<size_t>(static_cast<int64_t>(size) + change), '\0');
      writer.writeRecord(name, bytes.data(), bytes.size());
    }
    writer.writeEndOfFile();
  };
  rewrite(dir / "same.bin", 0);
  EXPECT_EQ(read_torch_state_dict(dir / "same.bin").size(), model->named_parameters().size());
  rewrite(dir / "longer.bin", 64);
  EXPECT_EQ(read_torch_state_dict(dir / "longer.bin").size(), model->named_parameters().size());
  for (const int64_t cut : {int64_t{-4}, -static_cast<int64_t>(largest_size / 2)}) {
    const std::string path = dir / msg("cut", -cut, ".bin");
    rewrite(path, cut);
    const std::string message = error_of([&] { read_torch_state_dict(path); });
    EXPECT_NE(message.find(path + ": '"), std::string::npos) << message;
    EXPECT_NE(message.find(msg("needs ", largest_size, " bytes of its storage")), std::string::npos) << message;
    EXPECT_NE(message.find(msg("the file's record holds ", static_cast<int64_t>(largest_size) + cut)),
              std::string::npos)
        << message;
  }
}

TEST(TorchStateDict, FilesThatCannotBeReadAreRefusedNamingTheFile) {
  TempDir dir;
  // torch.save's legacy format starts with a pickle (protocol 2), not a zip archive.
  std::ofstream(dir / "legacy.bin", std::ios::binary) << std::string("\x80\x02\x8a\x0a", 4) << "rest";
  std::string message = error_of([&] { read_torch_state_dict(dir / "legacy.bin"); });
  EXPECT_NE(message.find(dir / "legacy.bin"), std::string::npos) << message;
  EXPECT_NE(message.find("legacy format"), std::string::npos) << message;

  std::ofstream(dir / "text.bin") << "not a checkpoint";
  message = error_of([&] { read_torch_state_dict(dir / "text.bin"); });
  EXPECT_NE(message.find(dir / "text.bin"), std::string::npos) << message;
  EXPECT_NE(message.find("not a zip archive"), std::string::npos) << message;

  // A zip archive of something else than a dict of tensors.
  const std::vector<char> list = torch::pickle_save(c10::List<int64_t>({1, 2}));
  std::ofstream(dir / "list.bin", std::ios::binary).write(list.data(), static_cast<std::streamsize>(list.size()));
  message = error_of([&] { read_torch_state_dict(dir / "list.bin"); });
  EXPECT_NE(message.find(dir / "list.bin"), std::string::npos) << message;
  EXPECT_NE(message.find("not a state dict"), std::string::npos) << message;

  // A folder with TensorFlow weights only: named, with what to do.
  fs::create_directories(dir / "tf");
  std::ofstream(dir / "tf/tf_model.h5") << "x";
  T5Model model(small_config(), std::make_shared<SoloCommunicator>("tp"));
  message = error_of([&] { load_hf_checkpoint(*model, dir / "tf"); });
  EXPECT_NE(message.find("tf_model.h5 (TensorFlow weights), which t5scale does not read"), std::string::npos)
      << message;
}

}  // namespace
}  // namespace t5scale
