// safetensors files: the weights of trained networks and the trainer's checkpoints. See
// https://github.com/huggingface/safetensors for the format; it is small enough to read and write by hand here.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <istream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <rudder/nn/model_files.hpp>

namespace rudder {

// Every problem reading or writing a safetensors file; the message names the file and the problem.
class SafeTensorsError : public ModelError {
public:
    using ModelError::ModelError;
};

struct SafeTensors {
    std::vector<std::pair<std::string, at::Tensor>> tensors;  // in file order (by data offset), CPU, contiguous
    std::map<std::string, std::string> metadata;              // the header's "__metadata__"

    // The tensor called `name`, or nullptr.
    const at::Tensor* find(const std::string& name) const;
};

// One tensor as the header describes it, before its data is read.
struct SafeTensorsEntry {
    std::string name;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
};

// Says, for each tensor in the header, whether to read it; it may throw to refuse the file (a SafeTensorsError
// naming the tensor). Called for every tensor before any tensor's data is read.
using SafeTensorsSelection = std::function<bool(const SafeTensorsEntry&)>;

// The largest header this reader accepts; a real one is a few KB per hundred tensors.
constexpr uint64_t kMaxSafeTensorsHeader = 100ull * 1000 * 1000;

// Writes `tensors` in the given order (names must be unique and non-empty) with `metadata`. Supported dtypes:
// float32 (F32), float64 (F64), float16 (F16), bfloat16 (BF16), int64 (I64), int32 (I32), int16 (I16), int8 (I8),
// uint8 (U8), bool (BOOL). Tensors on another device are copied to the CPU. The file is written under a temporary
// name and renamed, so a reader (or a crash) never sees half a file. Throws SafeTensorsError.
void save_safetensors(const std::filesystem::path& file, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads a file written by save_safetensors or by the reference implementation. Never allocates more than the
// file's size and rejects, with a SafeTensorsError naming the file and the problem: a file shorter than its
// header, a header longer than kMaxSafeTensorsHeader, a header that is not a JSON object of well-formed entries,
// an unknown dtype, a shape whose size disagrees with its data_offsets, offsets outside the data area, ranges that
// overlap or leave gaps, and BOOL bytes other than 0 and 1.
// With a `selection`, only the tensors it accepts are read (the others are skipped, not read): a file whose header
// names a tensor its reader does not expect is refused before gigabytes of it are read.
// load_safetensors maps the file (copy-on-write) and gives tensors over the mapping, so the weights are not copied
// into the process: their pages are the page cache's, read as they are first touched, and the mapping lasts as long
// as any of its tensors. A tensor written in place gets private copies of the pages it writes. (A tensor whose data
// is not aligned for its type, which neither the reference writer nor save_safetensors produces, is copied.) The
// file must not be truncated or rewritten in place while its tensors live; save_safetensors replaces files by rename.
// With the environment variable RUDDER_MAP_WEIGHTS=0 the file is read into tensors of their own instead.
SafeTensors load_safetensors(const std::filesystem::path& file, const SafeTensorsSelection& selection = {});
// The same for `size` bytes from `in`, read into tensors of their own (the fuzz tests read from memory); `file`
// names the source in messages.
SafeTensors read_safetensors(std::istream& in, uint64_t size, const std::filesystem::path& file,
                             const SafeTensorsSelection& selection = {});

// A checkpoint sharded in Hugging Face's layout: `index_file` (model.safetensors.index.json) is
// {"metadata": {...}, "weight_map": {tensor name: shard file}}, the shards being safetensors files in the index's
// folder. Reads every shard the map names (with `selection`, as load_safetensors) into one SafeTensors, tensors in
// shard order. Refused, with a SafeTensorsError naming the index or the shard: an index that is not such an
// object, a shard name outside the index's folder, a missing or unreadable shard, a tensor in a shard that the map
// does not assign to that shard, and a tensor of the map that its shard does not hold.
SafeTensors load_sharded_safetensors(const std::filesystem::path& index_file,
                                     const SafeTensorsSelection& selection = {});

struct ConvertOptions {
    // Where the converted file goes; empty: over `file` itself (written whole to a new file first, then renamed).
    std::filesystem::path out;
    // Finite values beyond the dtype's largest (65,504 for float16) are refused unless this is set; then they are
    // stored as the largest value of their sign.
    bool clamp = false;
};
struct ConvertedWeights {
    uint64_t bytes = 0;   // the new file's size
    int64_t clamped = 0;  // values stored as the dtype's largest (ConvertOptions::clamp)
};

// Writes `file` with every float32, float16 and bfloat16 tensor stored as `dtype` ("float16", "bfloat16" or
// "float32"); float64 tensors, other tensors and the metadata are kept. Networks load such files into their
// float32 parameters (nn::load_module_tensors converts), so float16 storage halves a model's size at a rounding
// of 2^-11 relative. Throws SafeTensorsError, before anything is written, when a finite value would become
// infinite (unless options.clamp); the original is never left half-written.
ConvertedWeights convert_floating_tensors(const std::filesystem::path& file, const std::string& dtype,
                                          const ConvertOptions& options = {});

}  // namespace rudder
