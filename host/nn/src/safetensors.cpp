// safetensors by hand: the format is an 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the raw little-endian
// data, offsets counted from the end of the header. A dependency for that would be larger than this file.
#include <rudder/nn/safetensors.hpp>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <nlohmann/json.hpp>
#include <rudder/rudder_json.hpp>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <fstream>
#include <set>

namespace rudder {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct DtypeInfo {
    const char* name;
    at::ScalarType type;
    uint64_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {"F32", at::kFloat, 4}, {"F64", at::kDouble, 8}, {"F16", at::kHalf, 2},  {"BF16", at::kBFloat16, 2},
    {"I64", at::kLong, 8},  {"I32", at::kInt, 4},    {"I16", at::kShort, 2}, {"I8", at::kChar, 1},
    {"U8", at::kByte, 1},   {"BOOL", at::kBool, 1},
};

const DtypeInfo* dtype_by_name(const std::string& name) {
    for (const auto& d : kDtypes)
        if (name == d.name) return &d;
    return nullptr;
}

const DtypeInfo* dtype_by_type(at::ScalarType type) {
    for (const auto& d : kDtypes)
        if (type == d.type) return &d;
    return nullptr;
}

// The format is little-endian; so is every machine LibTorch supports, but say so rather than write garbage.
bool host_is_little_endian() {
    const uint16_t probe = 1;
    unsigned char first = 0;
    std::memcpy(&first, &probe, 1);
    return first == 1;
}

[[noreturn]] void fail(const fs::path& file, const std::string& what) {
    throw SafeTensorsError("'" + file.string() + "': " + what);
}

// A header entry, checked against the data area before anything is allocated for it.
struct Entry {
    std::string name;
    const DtypeInfo* dtype = nullptr;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;
};

// A JSON integer >= 0 as uint64, or a message saying what it is instead.
bool read_unsigned(const json& v, uint64_t& out) {
    if (v.is_number_unsigned()) {
        out = v.get<uint64_t>();
        return true;
    }
    return false;
}

Entry parse_entry(const fs::path& file, const std::string& name, const json& v, uint64_t data_size) {
    const std::string where = "tensor '" + name + "': ";
    if (!v.is_object()) fail(file, where + "expected an object with dtype, shape and data_offsets, got " + v.dump());
    Entry e;
    e.name = name;
    for (const char* key : {"dtype", "shape", "data_offsets"})
        if (!v.contains(key)) fail(file, where + "missing \"" + key + "\"");

    const json& dtype = v.at("dtype");
    if (!dtype.is_string()) fail(file, where + "\"dtype\" must be a string, got " + dtype.dump());
    e.dtype = dtype_by_name(dtype.get<std::string>());
    if (!e.dtype) {
        std::string known;
        for (const auto& d : kDtypes) known += std::string(known.empty() ? "" : ", ") + d.name;
        fail(file, where + "unknown dtype '" + dtype.get<std::string>() + "' (supported: " + known + ")");
    }

    const json& shape = v.at("shape");
    if (!shape.is_array()) fail(file, where + "\"shape\" must be an array, got " + shape.dump());
    // The element count is built with an overflow check; any count beyond the data area is a lie anyway.
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& dim : shape) {
        if (dim.is_number_integer() && !dim.is_number_unsigned())
            fail(file, where + "negative dimension " + dim.dump() + " in shape " + shape.dump());
        uint64_t d = 0;
        if (!read_unsigned(dim, d) || d > static_cast<uint64_t>(INT64_MAX))
            fail(file, where + "shape " + shape.dump() + " holds " + dim.dump() + ", expected integers >= 0");
        e.shape.push_back(static_cast<int64_t>(d));
        uint64_t product = 0;
        if (__builtin_mul_overflow(numel, d, &product)) overflow = true;
        numel = product;
    }
    if (e.shape.size() > 64)
        fail(file, where + "shape has " + std::to_string(e.shape.size()) + " dimensions (at most 64)");
    const bool has_zero = std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end();
    if (has_zero) {
        // No data, but LibTorch still computes strides as products of the other sizes: those must fit in int64.
        uint64_t stride = 1;
        for (int64_t d : e.shape)
            if (__builtin_mul_overflow(stride, static_cast<uint64_t>(std::max<int64_t>(d, 1)), &stride) ||
                stride > static_cast<uint64_t>(INT64_MAX))
                fail(file, where + "shape " + shape.dump() + " is too large to represent");
        overflow = false;
        numel = 0;
    }

    const json& offsets = v.at("data_offsets");
    uint64_t begin = 0, end = 0;
    if (!offsets.is_array() || offsets.size() != 2 || !read_unsigned(offsets[0], begin) ||
        !read_unsigned(offsets[1], end))
        fail(file, where + "\"data_offsets\" must be [begin, end] with integers >= 0, got " + offsets.dump());
    if (begin > end) fail(file, where + "data_offsets " + offsets.dump() + " end before they begin");
    if (end > data_size)
        fail(file, where + "data_offsets " + offsets.dump() + " lie outside the data area (" +
                       std::to_string(data_size) + " bytes)");
    uint64_t bytes = 0;
    if (overflow || __builtin_mul_overflow(numel, e.dtype->size, &bytes) || bytes != end - begin)
        fail(file, where + "shape " + shape.dump() + " of " + e.dtype->name + " needs " +
                       (overflow ? std::string("more bytes than fit in 64 bits") : std::to_string(bytes) + " bytes") +
                       " but data_offsets " + offsets.dump() + " span " + std::to_string(end - begin));
    e.begin = begin;
    e.end = end;
    return e;
}

}  // namespace

const at::Tensor* SafeTensors::find(const std::string& name) const {
    for (const auto& entry : tensors)
        if (entry.first == name) return &entry.second;
    return nullptr;
}

void save_safetensors(const fs::path& file, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
    if (!host_is_little_endian()) fail(file, "this machine is big-endian; safetensors data is little-endian");
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::vector<at::Tensor> data;
    uint64_t offset = 0;
    for (const auto& [name, tensor] : tensors) {
        if (name.empty() || name == "__metadata__") fail(file, "invalid tensor name '" + name + "'");
        if (header.contains(name)) fail(file, "two tensors are named '" + name + "'");
        if (!tensor.defined()) fail(file, "tensor '" + name + "' is undefined");
        const DtypeInfo* dtype = dtype_by_type(tensor.scalar_type());
        if (!dtype)
            fail(file, "tensor '" + name + "' has dtype " + std::string(c10::toString(tensor.scalar_type())) +
                           ", which safetensors files here do not hold");
        at::Tensor t = tensor.to(at::kCPU).contiguous();
        const uint64_t bytes = static_cast<uint64_t>(t.numel()) * dtype->size;
        header[name] = {{"dtype", dtype->name}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
        data.push_back(std::move(t));
    }
    std::string text = header.dump();
    // Pad with spaces so the data starts 8-byte aligned, as the reference writer does (readers may map it).
    text.append((8 - (text.size() + 8) % 8) % 8, ' ');

    const fs::path tmp = file.string() + ".tmp" + std::to_string(::getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) fail(file, "cannot open '" + tmp.string() + "' for writing");
        unsigned char length[8];
        uint64_t n = text.size();
        for (int i = 0; i < 8; ++i, n >>= 8) length[i] = static_cast<unsigned char>(n & 0xff);
        out.write(reinterpret_cast<const char*>(length), 8);
        out.write(text.data(), static_cast<std::streamsize>(text.size()));
        for (const auto& t : data)
            out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
        out.flush();
        if (!out) {
            std::error_code ec;
            fs::remove(tmp, ec);
            fail(file, "error writing the file (disk full?)");
        }
    }
    std::error_code ec;
    fs::rename(tmp, file, ec);
    if (ec) {
        fs::remove(tmp, ec);
        fail(file, "cannot move the written file into place: " + ec.message());
    }
}

namespace {

// What the header says: the metadata and the tensors sorted by offset, their ranges checked to tile the data area.
struct Layout {
    std::map<std::string, std::string> metadata;
    std::vector<Entry> entries;
    uint64_t data_offset = 0;  // where the data area starts in the file (8 + the header length)
};

Layout read_layout(std::istream& in, uint64_t file_size, const fs::path& file) {
    if (!host_is_little_endian()) fail(file, "this machine is big-endian; safetensors data is little-endian");
    if (file_size < 8)
        fail(file, "truncated: " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");

    unsigned char length[8];
    in.read(reinterpret_cast<char*>(length), 8);
    if (!in) fail(file, "cannot read the header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | length[i];
    if (n > kMaxSafeTensorsHeader)
        fail(file, "header length " + std::to_string(n) + " exceeds the limit of " +
                       std::to_string(kMaxSafeTensorsHeader) + " bytes (not a safetensors file?)");
    if (n > file_size - 8)
        fail(file, "truncated: the header length says " + std::to_string(n) + " bytes but only " +
                       std::to_string(file_size - 8) + " follow");
    const uint64_t data_size = file_size - 8 - n;

    std::string text(n, '\0');
    in.read(text.data(), static_cast<std::streamsize>(n));
    if (!in) fail(file, "cannot read the " + std::to_string(n) + "-byte header");
    // nlohmann::json, not the host's JsonDocument (ordered, linear lookups): a header names thousands of tensors,
    // each looked up by name.
    json header;
    try {
        // The header is two levels deep; refusing deeper nesting while parsing bounds the parser's work and stack.
        header = json_input::parse(text, 4);
    } catch (const std::exception& e) {
        fail(file, std::string("header is not valid JSON: ") + e.what());
    }
    if (!header.is_object()) fail(file, "header must be a JSON object, got " + std::string(header.type_name()));

    Layout layout;
    layout.data_offset = 8 + n;
    for (const auto& [name, value] : header.items()) {
        if (name == "__metadata__") {
            if (!value.is_object()) fail(file, "\"__metadata__\" must be an object of strings");
            for (const auto& [key, v] : value.items()) {
                if (!v.is_string())
                    fail(file, "\"__metadata__\" value of '" + key + "' must be a string, got " + v.dump());
                layout.metadata[key] = v.get<std::string>();
            }
            continue;
        }
        layout.entries.push_back(parse_entry(file, name, value, data_size));
    }
    // The data area must be covered exactly once, in some order: no overlap, no gap, nothing left over.
    auto& entries = layout.entries;
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
    uint64_t expected = 0;
    const Entry* previous = nullptr;
    for (const auto& e : entries) {
        if (e.begin < expected)
            fail(file, "tensor '" + e.name + "' (bytes " + std::to_string(e.begin) + "-" + std::to_string(e.end) +
                           ") overlaps tensor '" + previous->name + "' (bytes " + std::to_string(previous->begin) +
                           "-" + std::to_string(previous->end) + ")");
        if (e.begin > expected)
            fail(file, "bytes " + std::to_string(expected) + "-" + std::to_string(e.begin) +
                           " of the data area belong to no tensor (before tensor '" + e.name + "')");
        expected = e.end;
        previous = &e;
    }
    if (expected != data_size)
        fail(file, std::to_string(data_size - expected) + " bytes after the last tensor belong to no tensor");
    return layout;
}

std::vector<bool> selected(const Layout& layout, const SafeTensorsSelection& selection) {
    std::vector<bool> wanted(layout.entries.size(), true);
    if (selection)
        for (size_t i = 0; i < layout.entries.size(); ++i) {
            const Entry& e = layout.entries[i];
            wanted[i] = selection(SafeTensorsEntry{e.name, e.dtype->type, e.shape});
        }
    return wanted;
}

void check_bool_bytes(const Entry& e, const void* data, const fs::path& file) {
    if (e.dtype->type != at::kBool) return;
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (uint64_t b = 0; b < e.end - e.begin; ++b)
        if (bytes[b] > 1) fail(file, "BOOL tensor '" + e.name + "' holds the byte " + std::to_string(bytes[b]));
}

at::Tensor empty_tensor(const Entry& e, const fs::path& file) {
    try {
        return at::empty(e.shape, at::TensorOptions().dtype(e.dtype->type));
    } catch (const std::exception& ex) {
        fail(file, "cannot create tensor '" + e.name + "': " + ex.what());
    }
}

// A file mapped copy-on-write: tensors over it read the file's pages where they are (shared with the page cache,
// not copied into the process), and one written in place gets private copies of the pages it writes.
struct Mapping {
    void* base = MAP_FAILED;
    size_t size = 0;
    ~Mapping() {
        if (base != MAP_FAILED) ::munmap(base, size);
    }
};

}  // namespace

SafeTensors load_safetensors(const fs::path& file, const SafeTensorsSelection& selection) {
    std::error_code ec;
    const uint64_t file_size = fs::file_size(file, ec);
    if (ec) fail(file, "cannot read: " + ec.message());
    std::ifstream in(file, std::ios::binary);
    if (!in) fail(file, "cannot open for reading");
    // RUDDER_MAP_WEIGHTS=0: read into the process instead. A forward over weights in the process's own memory
    // measured 2-3% faster than over the page cache's (docs/checkpoints.md), at the cost of a copy of the file.
    if (const char* map = std::getenv("RUDDER_MAP_WEIGHTS"); map != nullptr && std::string(map) == "0")
        return read_safetensors(in, file_size, file, selection);
    const Layout layout = read_layout(in, file_size, file);
    const std::vector<bool> wanted = selected(layout, selection);
    SafeTensors result;
    result.metadata = layout.metadata;
    if (file_size == layout.data_offset) {  // no data: nothing to map (an empty mapping is an error)
        for (size_t i = 0; i < layout.entries.size(); ++i)
            if (wanted[i]) result.tensors.emplace_back(layout.entries[i].name, empty_tensor(layout.entries[i], file));
        return result;
    }
    auto mapping = std::make_shared<Mapping>();
    {
        const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) fail(file, std::string("cannot open for reading: ") + std::strerror(errno));
        mapping->size = static_cast<size_t>(file_size);
        mapping->base = ::mmap(nullptr, mapping->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        const int mmap_errno = errno;
        ::close(fd);
        if (mapping->base == MAP_FAILED) fail(file, std::string("cannot map: ") + std::strerror(mmap_errno));
    }
    const char* data = static_cast<const char*>(mapping->base) + layout.data_offset;
    for (size_t i = 0; i < layout.entries.size(); ++i) {
        if (!wanted[i]) continue;
        const Entry& e = layout.entries[i];
        char* at_data = const_cast<char*>(data + e.begin);
        check_bool_bytes(e, at_data, file);
        at::Tensor t;
        // Over the mapping where the data is aligned for its type (always, for files written as the reference
        // writer and save_safetensors write them), else copied out of it.
        if (reinterpret_cast<uintptr_t>(at_data) % e.dtype->size == 0 && e.end > e.begin) {
            t = at::from_blob(
                at_data, e.shape, [mapping](void*) {}, at::TensorOptions().dtype(e.dtype->type));
        } else {
            t = empty_tensor(e, file);  // (an empty tensor has no data pointer to copy to)
            if (e.end > e.begin) std::memcpy(t.data_ptr(), at_data, static_cast<size_t>(e.end - e.begin));
        }
        result.tensors.emplace_back(e.name, std::move(t));
    }
    return result;
}

SafeTensors read_safetensors(std::istream& in, uint64_t file_size, const fs::path& file,
                             const SafeTensorsSelection& selection) {
    const Layout layout = read_layout(in, file_size, file);
    const std::vector<bool> wanted = selected(layout, selection);
    SafeTensors result;
    result.metadata = layout.metadata;
    // Skipped tensors are sought over where the stream can seek (files, memory), read past otherwise.
    const std::streampos data_start = in.tellg();
    uint64_t position = 0;  // in the data area
    for (size_t i = 0; i < layout.entries.size(); ++i) {
        const Entry& e = layout.entries[i];
        if (!wanted[i]) continue;
        if (e.begin != position) {
            if (data_start != std::streampos(-1))
                in.seekg(data_start + static_cast<std::streamoff>(e.begin));
            else
                in.ignore(static_cast<std::streamsize>(e.begin - position));
            if (!in) fail(file, "cannot reach the data of tensor '" + e.name + "'");
        }
        position = e.end;
        at::Tensor t = empty_tensor(e, file);
        in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - e.begin));
        if (!in) fail(file, "cannot read the data of tensor '" + e.name + "'");
        check_bool_bytes(e, t.data_ptr(), file);
        result.tensors.emplace_back(e.name, std::move(t));
    }
    return result;
}

SafeTensors load_sharded_safetensors(const fs::path& index_file, const SafeTensorsSelection& selection) {
    json index;
    try {
        index = read_json_file(index_file);
    } catch (const ModelError& e) {
        throw SafeTensorsError(e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index.at("weight_map").is_object())
        fail(index_file, "a sharded checkpoint's index must be a JSON object with a \"weight_map\" object");
    // Shards in the order they first appear, each with the tensors the map gives it.
    std::vector<std::string> shards;
    std::map<std::string, std::string> shard_of;
    for (const auto& [name, value] : index.at("weight_map").items()) {
        if (!value.is_string())
            fail(index_file, "weight_map entry '" + name + "' must name a file, got " + value.dump());
        const std::string shard = value.get<std::string>();
        const fs::path relative = fs::path(shard).lexically_normal();
        if (shard.empty() || !relative.is_relative() || *relative.begin() == ".." || relative.has_parent_path())
            fail(index_file,
                 "weight_map entry '" + name + "' names \"" + shard + "\", which is not a file beside the index");
        if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
        shard_of[name] = shard;
    }
    if (shards.empty()) fail(index_file, "the weight_map names no tensor");
    SafeTensors result;
    for (const auto& shard : shards) {
        const fs::path file = index_file.parent_path() / shard;
        std::error_code ec;
        if (!fs::is_regular_file(file, ec))
            fail(index_file, "shard '" + shard + "' named by the weight_map does not exist (" + file.string() + ")");
        std::set<std::string> in_header;  // every tensor of the shard's header, read or not
        auto in_this_shard = [&](const SafeTensorsEntry& entry) {
            const auto found = shard_of.find(entry.name);
            if (found == shard_of.end() || found->second != shard)
                fail(file, "holds tensor '" + entry.name + "', which " + index_file.filename().string() +
                               (found == shard_of.end() ? " does not list" : " assigns to '" + found->second + "'"));
            in_header.insert(entry.name);
            return selection ? selection(entry) : true;
        };
        SafeTensors part = load_safetensors(file, in_this_shard);
        for (const auto& [name, owner] : shard_of)
            if (owner == shard && !in_header.count(name))
                fail(file, "lacks tensor '" + name + "', which " + index_file.filename().string() + " assigns to it");
        for (auto& [key, value] : part.metadata) result.metadata.emplace(key, value);
        for (auto& named : part.tensors) result.tensors.push_back(std::move(named));
    }
    return result;
}

ConvertedWeights convert_floating_tensors(const std::filesystem::path& file, const std::string& dtype_name,
                                          const ConvertOptions& options) {
    const std::map<std::string, at::ScalarType> dtypes = {
        {"float16", at::kHalf}, {"bfloat16", at::kBFloat16}, {"float32", at::kFloat}};
    const auto found = dtypes.find(dtype_name);
    if (found == dtypes.end())
        throw SafeTensorsError("'" + file.string() + "': weights can be stored as float16, bfloat16 or float32, not '" +
                               dtype_name + "'");
    const at::ScalarType dtype = found->second;
    const double largest = dtype == at::kHalf       ? 65504.0
                           : dtype == at::kBFloat16 ? 3.3895313892515355e38
                                                    : 3.4028234663852886e38;
    SafeTensors st = load_safetensors(file);
    ConvertedWeights out;
    // float64 tensors are kept: a network holds in float64 only what float32 would already round (CDCD's running
    // warp losses) and loads them as float64.
    for (auto& [name, tensor] : st.tensors) {
        if (!at::isFloatingType(tensor.scalar_type()) || tensor.scalar_type() == at::kDouble) continue;
        // Finite values the new dtype cannot hold would become infinities; values that were not finite stay so.
        const at::Tensor wide = tensor.to(at::kDouble);
        const at::Tensor over = wide.abs().gt(largest).logical_and(wide.isfinite());
        const int64_t count = over.sum().item<int64_t>();
        if (count > 0) {
            if (!options.clamp) {
                const double worst = wide.masked_select(over).abs().max().item<double>();
                throw SafeTensorsError("'" + file.string() + "': tensor '" + name + "' holds " + std::to_string(count) +
                                       " value(s) beyond " + dtype_name + "'s largest, " +
                                       nlohmann::json(largest).dump() + " (the largest is " +
                                       nlohmann::json(worst).dump() +
                                       "); they would become infinite. Nothing was "
                                       "written; --clamp stores them as the largest value of their sign");
            }
            tensor = wide.clamp(-largest, largest).where(over, wide).to(tensor.scalar_type());  // infinities stay
            out.clamped += count;
        }
        tensor = tensor.to(dtype).contiguous();
    }
    const std::filesystem::path target = options.out.empty() ? file : options.out;
    save_safetensors(target, st.tensors, st.metadata);  // a new file, renamed over the target once whole
    out.bytes = static_cast<uint64_t>(std::filesystem::file_size(target));
    return out;
}

}  // namespace rudder
