#include "io/torch_state_dict.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import_read.h>

#include <array>
#include <fstream>

#include "core/check.h"

namespace t5scale {

namespace {

const char* kResave =
    "load it in Python and save it again (torch.save(torch.load(path), path), or "
    "model.save_pretrained(folder, safe_serialization=True) for model.safetensors)";

// The file's first bytes: a zip archive starts with a local file header, "PK\3\4"; torch.save's legacy format
// with a pickle (protocol 2: 0x80 0x02).
void check_is_zip_archive(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  T5S_CHECK(in, path, ": cannot be opened");
  std::array<char, 4> magic{};
  in.read(magic.data(), magic.size());
  if (in.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4) return;
  if (in.gcount() >= 2 && static_cast<unsigned char>(magic[0]) == 0x80 && magic[1] == 2) {
    throw Error(msg(path, ": written in torch.save's legacy format (before PyTorch 1.6, or with "
                          "_use_new_zipfile_serialization=False), which LibTorch does not read; ", kResave));
  }
  throw Error(msg(path, ": not a zip archive, so not a state dict that torch.save wrote (", in.gcount(),
                  " bytes checked)"));
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> read_torch_state_dict(const std::string& path) {
  check_is_zip_archive(path);
  c10::IValue value;
  try {
    caffe2::serialize::PyTorchStreamReader reader{path};
    // torch.save's layout, as torch::pickle_load reads it: the dict in data.pkl, storages under data/.
    value = torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"",
                                              /*type_resolver=*/std::nullopt, /*obj_loader=*/std::nullopt,
                                              /*device=*/torch::Device(torch::kCPU), reader);
  } catch (const c10::Error& e) {
    throw Error(
        msg(path, ": cannot be read as a torch.save state dict: ", e.what_without_backtrace(), " (", kResave, ")"));
  }
  T5S_CHECK(value.isGenericDict(), path, ": holds a ", value.tagKind(), ", not a state dict (a dict of tensors)");
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& item : value.toGenericDict()) {
    T5S_CHECK(item.key().isString(), path, ": a key of the state dict is a ", item.key().tagKind(), ", not a name");
    const std::string& name = item.key().toStringRef();
    T5S_CHECK(item.value().isTensor(), path, ": '", name, "' is a ", item.value().tagKind(), ", not a tensor");
    tensors.emplace_back(name, item.value().toTensor());
  }
  return tensors;
}

}  // namespace t5scale
