// Precompiled once (t5scale_torch_pch) for every target on LibTorch: parsing torch/torch.h dominates compile time.
#pragma once
#include <torch/torch.h>
