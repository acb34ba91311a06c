#include "io/torch_state_dict.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/storage_context.h>

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
    // Every storage as its record holds it, its size the record's: the unpickler takes storages from this context
    // instead of sizing them by the pickle's element counts over a record that may be shorter (it would then read
    // past the record). A tensor that needs more than its record holds is refused below.
    auto storages = std::make_shared<torch::jit::DeserializationStorageContext>();
    for (const std::string& record : reader.getAllRecords()) {
      if (record.rfind("data/", 0) != 0) continue;
      auto [bytes, size] = reader.getRecord(record);
      storages->addStorage(record.substr(5), c10::Storage(c10::Storage::use_byte_size_t(), static_cast<int64_t>(size),
                                                          std::move(bytes), /*allocator=*/nullptr, /*resizable=*/false));
    }
    // torch.save's layout, as torch::pickle_load reads it: the dict in data.pkl, storages under data/.
    value = torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"",
                                              /*type_resolver=*/std::nullopt, /*obj_loader=*/std::nullopt,
                                              /*device=*/torch::Device(torch::kCPU), reader,
                                              torch::jit::Unpickler::defaultTypeParser, storages);
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
    const torch::Tensor tensor = item.value().toTensor();
    // A record cut short gives a storage smaller than the tensor's view of it, whose elements past the end the file
    // never held (torch.load refuses such a file too: "record size ... does not match expected size").
    if (tensor.numel() > 0) {
      int64_t last = tensor.storage_offset();
      for (int64_t d = 0; d < tensor.dim(); ++d) last += (tensor.size(d) - 1) * tensor.stride(d);
      const int64_t needed_bytes = (last + 1) * static_cast<int64_t>(tensor.element_size());
      const int64_t stored_bytes = static_cast<int64_t>(tensor.storage().nbytes());
      T5S_CHECK(stored_bytes >= needed_bytes, path, ": '", name, "' needs ", needed_bytes, " bytes of its storage ",
                "(shape ", tensor.sizes(), ", ", tensor.dtype(), "), but the file's record holds ", stored_bytes,
                ": the file is cut short or damaged; ", kResave);
    }
    tensors.emplace_back(name, tensor);
  }
  return tensors;
}

}  // namespace t5scale
