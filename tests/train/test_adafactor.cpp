// DistributedAdafactor against transformers.optimization.Adafactor on the fixtures that
// make_adafactor_fixtures.py wrote to $T5SCALE_ADAFACTOR_FIXTURES: every option set, every step, every parameter,
// in fp64 and fp32. (That tensor parallelism changes nothing: tests/mpi/test_grid_training.cpp.)
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "core/check.h"
#include "io/safetensors.h"
#include "support/test_support.h"
#include "train/distributed_adafactor.h"
#include "train/optimizer_harness.h"

namespace t5scale {
namespace {

// fp64: both implementations evaluate the same formulas in another order (sum then divide for a mean, the norm as
// the root of a sum of squares); what remains is fp64 rounding, ~1e-15. A wrong formula, option or order of
// operations (weight decay before or after the update, RMS of the parameter before or after it) shows at 1e-4
// or more.
constexpr double kFp64Tolerance = 1e-12;
// fp32: each implementation rounds every stored parameter once per step (2^-24 relative, half an ulp) and its
// update a few times; transformers' own fp32 result is 1.8e-7 from its fp64 one after the 8 steps (the worst
// case). Two such fp32 results are within 2 x 8 x 2^-24 = 9.5e-7 of each other: 1e-6, the fp32 bound of docs/ARCHITECTURE.md.
constexpr double kFp32Tolerance = 1e-6;

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

SafetensorsFile open_fixtures() {
  const char* dir = std::getenv("T5SCALE_ADAFACTOR_FIXTURES");
  if (dir == nullptr) {
    throw std::runtime_error("T5SCALE_ADAFACTOR_FIXTURES is not set (ctest sets it; see tests/train/CMakeLists.txt)");
  }
  return SafetensorsFile::open((std::filesystem::path(dir) / "adafactor.safetensors").string());
}

AdafactorOptions options_from_json(const nlohmann::json& j) {
  AdafactorOptions o;
  o.relative_step = j.at("relative_step").get<bool>();
  o.scale_parameter = j.at("scale_parameter").get<bool>();
  o.warmup_init = j.at("warmup_init").get<bool>();
  o.decay_rate = j.at("decay_rate").get<double>();
  o.clip_threshold = j.at("clip_threshold").get<double>();
  o.beta1 = j.at("beta1").is_null() ? 0.0 : j.at("beta1").get<double>();
  o.eps1 = j.at("eps").at(0).get<double>();
  o.eps2 = j.at("eps").at(1).get<double>();
  o.weight_decay = j.at("weight_decay").get<double>();
  return o;
}

TEST(AdafactorVsTransformers, EveryCaseEveryStepInFp64AndFp32) {
  const SafetensorsFile fixtures = open_fixtures();
  ASSERT_EQ(fixtures.metadata().at("format_version"), "1");
  std::cout << "reference from transformers " << fixtures.metadata().at("transformers") << ", torch "
            << fixtures.metadata().at("torch") << "\n";
  const std::vector<std::string> names = split(fixtures.metadata().at("parameters"));
  const std::vector<std::string> cases = split(fixtures.metadata().at("cases"));
  const int steps = std::stoi(fixtures.metadata().at("steps"));
  ASSERT_GE(cases.size(), 5u);
  ASSERT_GE(steps, 2);

  for (const std::string dtype : {"f64", "f32"}) {
    const double tolerance = dtype == "f64" ? kFp64Tolerance : kFp32Tolerance;
    for (const std::string& case_name : cases) {
      const auto json = nlohmann::json::parse(fixtures.metadata().at("options/" + case_name));
      const AdafactorOptions options = options_from_json(json);
      const double lr = json.at("lr").is_null() ? 0.0 : json.at("lr").get<double>();
      std::vector<std::pair<std::string, torch::Tensor>> initial;
      for (const std::string& name : names) initial.emplace_back(name, fixtures.read(dtype + "/init/" + name));
      // A small bucket size: the parameters spread over several buckets.
      testing::OptimizerHarness harness(initial, 256);
      DistributedAdafactor optimizer(*harness.gradients, harness.grid, options);
      double worst = 0.0;
      for (int step = 1; step <= steps; ++step) {
        std::vector<torch::Tensor> grads;
        for (const std::string& name : names) grads.push_back(fixtures.read(msg(dtype, "/grad/", step, "/", name)));
        harness.set_gradients(grads);
        const StepOutcome outcome = optimizer.step(lr);
        const double expected_step = options.relative_step
                                         ? std::min(options.warmup_init ? 1e-6 * step : 1e-2, 1.0 / std::sqrt(step))
                                         : lr;
        EXPECT_DOUBLE_EQ(outcome.learning_rate, expected_step) << case_name << " step " << step;
        for (size_t k = 0; k < names.size(); ++k) {
          const torch::Tensor want = fixtures.read(msg(dtype, "/", case_name, "/", step, "/", names[k]));
          ASSERT_EQ(harness.params[k].scalar_type(), want.scalar_type());
          EXPECT_TRUE(testing::tensors_close(msg(dtype, " ", case_name, " step ", step, " ", names[k]),
                                             harness.params[k], want, tolerance));
          worst = std::max(worst, testing::compare(harness.params[k], want).norm_rel_error);
        }
      }
      std::cout << dtype << " " << case_name << ": worst norm rel error " << worst << "\n";
    }
  }
}

TEST(AdafactorOptionsCheck, RefusesZero1AndInvalidOptions) {
  testing::OptimizerHarness harness({{"w", torch::ones({4, 4})}}, 1024);
  std::vector<ParameterSlot> slots = harness.gradients->slots();
  for (auto& slot : slots) slot.param = slot.param.detach().clone().set_requires_grad(true);
  GradientBuckets zero1(slots, harness.grid.dp, 1024, GradientSharding::kOptimizer);
  EXPECT_NE(testing::error_of([&] { DistributedAdafactor(zero1, harness.grid, {}); }).find("use adamw with zero1"),
            std::string::npos);

  AdafactorOptions warmup;
  warmup.warmup_init = true;
  EXPECT_NE(testing::error_of([&] { DistributedAdafactor(*harness.gradients, harness.grid, warmup); })
                .find("adafactor_warmup_init needs optimizer.adafactor_relative_step"),
            std::string::npos);
  AdafactorOptions clip;
  clip.clip_threshold = 0.0;
  EXPECT_NE(testing::error_of([&] { DistributedAdafactor(*harness.gradients, harness.grid, clip); })
                .find("adafactor_clip_threshold must be > 0"),
            std::string::npos);
  AdafactorOptions beta;
  beta.beta1 = 1.0;
  EXPECT_NE(testing::error_of([&] { DistributedAdafactor(*harness.gradients, harness.grid, beta); })
                .find("adafactor_beta1 must lie in [0, 1)"),
            std::string::npos);
}

}  // namespace
}  // namespace t5scale
