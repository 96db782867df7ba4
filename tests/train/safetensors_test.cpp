// safetensors I/O: every dtype round-trips, and every kind of corrupt file is refused with a message that names
// the file and the problem (never a crash, never an allocation the file cannot back).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <rudder/nn/safetensors.hpp>

#include "train_support.hpp"

namespace rudder {
namespace {

using json = nlohmann::json;
using test::ScratchDir;

// A file in the reference layout from a header text and raw data bytes; `length` overrides the length field.
void write_raw(const std::filesystem::path& file, const std::string& header, const std::string& data,
               std::optional<uint64_t> length = std::nullopt) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    uint64_t n = length.value_or(header.size());
    for (int i = 0; i < 8; ++i, n >>= 8) out.put(static_cast<char>(n & 0xff));
    out << header << data;
}

// Expects load_safetensors(file) to throw SafeTensorsError whose message names the file and contains `part`.
void expect_refused(const std::filesystem::path& file, const std::string& part) {
    try {
        load_safetensors(file);
        ADD_FAILURE() << "expected SafeTensorsError containing '" << part << "'";
    } catch (const SafeTensorsError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(file.string()), std::string::npos) << what;
        EXPECT_NE(what.find(part), std::string::npos) << what << "\n  lacks: " << part;
    }
}

TEST(SafeTensors, EveryDtypeRoundTrips) {
    ScratchDir dir;
    const auto file = dir.path() / "all.safetensors";
    at::manual_seed(3);
    std::vector<std::pair<std::string, at::Tensor>> tensors = {
        {"f32", at::randn({3, 4})},
        {"f64", at::randn({2, 2, 2}, at::kDouble)},
        {"f16", at::randn({5}).to(at::kHalf)},
        {"bf16", at::randn({2, 3}).to(at::kBFloat16)},
        {"i64", at::arange(-6, 6, at::kLong).view({3, 4})},
        {"i32", at::arange(0, 7, at::kInt)},
        {"i16", at::arange(-3, 3, at::kShort)},
        {"i8", at::arange(-128, 127, 17, at::kChar)},
        {"u8", at::arange(0, 256, 51, at::kLong).to(at::kByte)},
        {"bool", at::tensor({1, 0, 1, 1}, at::kLong).to(at::kBool)},
        {"scalar", at::scalar_tensor(2.5)},
        {"empty", at::empty({0, 3})},
        {"transposed", at::arange(12, at::kFloat).view({3, 4}).t()},  // not contiguous: written in logical order
    };
    const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "42"}};
    save_safetensors(file, tensors, metadata);

    const SafeTensors loaded = load_safetensors(file);
    EXPECT_EQ(loaded.metadata, metadata);
    ASSERT_EQ(loaded.tensors.size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
        SCOPED_TRACE(tensors[i].first);
        EXPECT_EQ(loaded.tensors[i].first, tensors[i].first);  // file order = the order written
        const at::Tensor& got = loaded.tensors[i].second;
        EXPECT_EQ(got.scalar_type(), tensors[i].second.scalar_type());
        EXPECT_EQ(got.sizes(), tensors[i].second.sizes());
        EXPECT_TRUE(at::equal(got, tensors[i].second));
    }
    ASSERT_NE(loaded.find("i64"), nullptr);
    EXPECT_EQ(loaded.find("missing"), nullptr);
}

TEST(SafeTensors, WritesTheReferenceLayout) {
    ScratchDir dir;
    const auto file = dir.path() / "layout.safetensors";
    save_safetensors(file, {{"b", at::ones({2}, at::kFloat)}, {"a", at::zeros({3}, at::kLong)}}, {{"k", "v"}});
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
    EXPECT_EQ((8 + n) % 8, 0u) << "data must start 8-byte aligned";
    const json header = json::parse(bytes.substr(8, n));
    EXPECT_EQ(header["__metadata__"], (json{{"k", "v"}}));
    EXPECT_EQ(header["b"], (json{{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}));
    EXPECT_EQ(header["a"], (json{{"dtype", "I64"}, {"shape", {3}}, {"data_offsets", {8, 32}}}));
    EXPECT_EQ(bytes.size(), 8 + n + 32);
    float first = 0;
    std::memcpy(&first, bytes.data() + 8 + n, 4);
    EXPECT_EQ(first, 1.0f);
}

TEST(SafeTensors, ReadsAHandWrittenFileWithEntriesOutOfOrder) {
    ScratchDir dir;
    const auto file = dir.path() / "hand.safetensors";
    // JSON order is not data order: "x" holds the second 4 bytes.
    const float values[2] = {1.5f, -2.0f};
    write_raw(
        file,
        R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"y":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
        std::string(reinterpret_cast<const char*>(values), 8));
    const SafeTensors loaded = load_safetensors(file);
    ASSERT_EQ(loaded.tensors.size(), 2u);
    EXPECT_EQ(loaded.tensors[0].first, "y");
    EXPECT_EQ(loaded.find("y")->item<float>(), 1.5f);
    EXPECT_EQ(loaded.find("x")->item<float>(), -2.0f);
    EXPECT_TRUE(loaded.metadata.empty());
}

// load_safetensors gives tensors over a private mapping of the file: they outlive the file's name, a write to one
// changes neither the file nor a second load, and data not aligned for its type is copied out correctly.
TEST(SafeTensors, MappedTensorsOutliveTheFileAndWritesStayPrivate) {
    ScratchDir dir;
    const auto file = dir.path() / "w.safetensors";
    const at::Tensor original = at::arange(1000, at::kFloat).reshape({10, 100});
    save_safetensors(file, {{"w", original}, {"b", at::ones({3}, at::kHalf)}});
    SafeTensors first = load_safetensors(file);
    SafeTensors second = load_safetensors(file);
    at::Tensor w = *first.find("w");
    w.mul_(2);  // private: the file and the other load keep their values
    EXPECT_TRUE(at::equal(second.find("w")->clone(), original));
    EXPECT_TRUE(at::equal(load_safetensors(file).find("w")->clone(), original));
    std::filesystem::remove(file);
    EXPECT_TRUE(at::equal(w, original * 2));
    EXPECT_TRUE(at::equal(*second.find("b"), at::ones({3}, at::kHalf)));

    // A 55-byte header puts the data at offset 63: a float32 there is copied, and equal.
    float values[3] = {1.5f, -2.25f, 3.0f};
    std::string data(reinterpret_cast<const char*>(values), sizeof values);
    write_raw(file, R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", data);
    const SafeTensors odd = load_safetensors(file);
    EXPECT_TRUE(at::equal(*odd.find("x"), at::tensor({1.5f, -2.25f, 3.0f})));
}

TEST(SafeTensors, RefusesTruncatedFiles) {
    ScratchDir dir;
    const auto tiny = dir.path() / "tiny.safetensors";
    std::ofstream(tiny, std::ios::binary) << "abc";
    expect_refused(tiny, "truncated: 3 bytes, shorter than the 8-byte header length");

    // A whole file cut short inside its data.
    const auto cut = dir.path() / "cut.safetensors";
    save_safetensors(cut, {{"w", at::ones({16})}});
    std::filesystem::resize_file(cut, std::filesystem::file_size(cut) - 10);
    expect_refused(cut, "lie outside the data area");
}

TEST(SafeTensors, RefusesAWrongHeaderLength) {
    ScratchDir dir;
    const std::string header = R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
    const auto longer = dir.path() / "longer.safetensors";
    write_raw(longer, header, "ab", header.size() + 100);
    expect_refused(longer, "truncated: the header length says " + std::to_string(header.size() + 100) +
                               " bytes but only " + std::to_string(header.size() + 2) + " follow");
    const auto shorter = dir.path() / "shorter.safetensors";
    write_raw(shorter, header, "ab", header.size() - 5);
    expect_refused(shorter, "header is not valid JSON");
}

TEST(SafeTensors, RefusesAHugeHeaderLengthBeforeAllocating) {
    ScratchDir dir;
    const auto file = dir.path() / "huge.safetensors";
    write_raw(file, "{}", "", uint64_t{1} << 62);
    expect_refused(file, "header length 4611686018427387904 exceeds the limit of 100000000 bytes");
}

TEST(SafeTensors, RefusesLyingOffsets) {
    ScratchDir dir;
    const auto file = dir.path() / "lying.safetensors";
    write_raw(file, R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,8]}})", std::string(8, '\0'));
    expect_refused(file, "tensor 'w': shape [2,2] of F32 needs 16 bytes but data_offsets [0,8] span 8");

    const auto outside = dir.path() / "outside.safetensors";
    write_raw(outside, R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", std::string(4, '\0'));
    expect_refused(outside, "tensor 'w': data_offsets [4,8] lie outside the data area (4 bytes)");

    const auto reversed = dir.path() / "reversed.safetensors";
    write_raw(reversed, R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", std::string(4, '\0'));
    expect_refused(reversed, "data_offsets [4,0] end before they begin");

    // Overflowing shapes cannot sneak past the size check.
    const auto overflow = dir.path() / "overflow.safetensors";
    write_raw(overflow, R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", "");
    expect_refused(overflow, "more bytes than fit in 64 bits");
    const auto strides = dir.path() / "strides.safetensors";
    write_raw(strides,
              R"({"w":{"dtype":"F32","shape":[1099511627776,0,1099511627776,1099511627776],"data_offsets":[0,0]}})",
              "");
    expect_refused(strides, "is too large to represent");
}

TEST(SafeTensors, RefusesOverlapsGapsAndLeftovers) {
    ScratchDir dir;
    const auto overlap = dir.path() / "overlap.safetensors";
    write_raw(
        overlap,
        R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
        std::string(6, '\0'));
    expect_refused(overlap, "tensor 'b' (bytes 2-6) overlaps tensor 'a' (bytes 0-4)");

    const auto gap = dir.path() / "gap.safetensors";
    write_raw(
        gap,
        R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
        std::string(6, '\0'));
    expect_refused(gap, "bytes 2-4 of the data area belong to no tensor (before tensor 'b')");

    const auto leftover = dir.path() / "leftover.safetensors";
    write_raw(leftover, R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", std::string(5, '\0'));
    expect_refused(leftover, "3 bytes after the last tensor belong to no tensor");
}

TEST(SafeTensors, RefusesMalformedHeaders) {
    ScratchDir dir;
    const auto file = dir.path() / "bad.safetensors";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"({"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})",
         "tensor 'w': unknown dtype 'Q7' (supported: F32, "},
        {R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})",
         "tensor 'w': negative dimension -1 in shape [-1]"},
        {R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", "holds 1.5, expected integers >= 0"},
        {R"({"w":{"dtype":"U8","shape":[1]}})", "tensor 'w': missing \"data_offsets\""},
        {R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "\"data_offsets\" must be [begin, end]"},
        {R"({"w":[1,2]})", "tensor 'w': expected an object with dtype, shape and data_offsets"},
        {R"([1,2,3])", "header must be a JSON object, got array"},
        {R"({"w":)", "header is not valid JSON"},
        {R"({"__metadata__":{"step":3}})", "\"__metadata__\" value of 'step' must be a string, got 3"},
        {R"({"w":{"dtype":"U8","shape":[[[[[[[1]]]]]]],"data_offsets":[0,1]}})", "nested deeper than 4 levels"},
    };
    for (const auto& [header, message] : cases) {
        SCOPED_TRACE(header);
        write_raw(file, header, std::string(1, '\0'));
        expect_refused(file, message);
    }
    write_raw(file, R"({"b":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x02", 2));
    expect_refused(file, "BOOL tensor 'b' holds the byte 2");
}

TEST(SafeTensors, RefusesMissingFilesAndBadWrites) {
    ScratchDir dir;
    expect_refused(dir.path() / "absent.safetensors", "cannot read");
    const auto file = dir.path() / "out.safetensors";
    auto expect_save_error = [&](const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                 const std::string& part) {
        try {
            save_safetensors(file, tensors);
            ADD_FAILURE() << "expected SafeTensorsError containing '" << part << "'";
        } catch (const SafeTensorsError& e) {
            EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
        }
    };
    expect_save_error({{"a", at::ones({1})}, {"a", at::ones({1})}}, "two tensors are named 'a'");
    expect_save_error({{"", at::ones({1})}}, "invalid tensor name ''");
    expect_save_error({{"c", at::ones({1}, at::kComplexFloat)}}, "which safetensors files here do not hold");
    expect_save_error({{"u", at::Tensor()}}, "tensor 'u' is undefined");
    EXPECT_FALSE(std::filesystem::exists(file)) << "a failed save must leave nothing behind";
}

}  // namespace
}  // namespace rudder
