// Precompiled for every target: parsing torch/torch.h dominates compile time on small machines.
#pragma once
#include <torch/torch.h>
