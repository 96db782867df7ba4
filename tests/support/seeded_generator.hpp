// A CPU generator with a fixed seed, for tests that draw noise reproducibly.
#pragma once

#include <ATen/CPUGeneratorImpl.h>

#include <cstdint>

namespace rudder {

inline at::Generator make_gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

}  // namespace rudder
