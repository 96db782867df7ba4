// libFuzzer target: any bytes as a safetensors file. The reader must return tensors that exactly cover the data
// it was given, or throw SafeTensorsError; never crash, read out of bounds or allocate more than the input's size.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include <rudder/nn/safetensors.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
    try {
        const rudder::SafeTensors st = rudder::read_safetensors(in, size, "fuzz-input.safetensors");
        uint64_t bytes = 0;
        for (const auto& [name, tensor] : st.tensors) bytes += tensor.nbytes();
        if (bytes > size) std::abort();  // more tensor data than the file holds
    } catch (const rudder::SafeTensorsError&) {
    }
    return 0;
}
