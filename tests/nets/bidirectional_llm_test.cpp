// LLaDA and Dream checkpoints in Hugging Face layout (nn/bidirectional_llm.hpp): tiny random-weight checkpoints
// written by bidirectional_llm_fixture.py with the public checkpoints' tensor names, shapes and config fields, with
// grouped key/value heads and an embedding padded past the tokenizer, compared with that script's plain-PyTorch
// (float64) forward; the refusals; and the checkpoints as models a recipe samples with hard constraints. Skips,
// saying why, where python3-torch is missing.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <rudder/nn/bidirectional_llm.hpp>
#include <rudder/nn/denoiser_net.hpp>
#include <rudder/nn/safetensors.hpp>
#include <rudder/plugins/plugins.hpp>
#include <rudder/runtime/generator.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/runtime/recipe.hpp>

#include "checkpoint_files.hpp"
#include "generated_checkpoints.hpp"
#include "row_products.hpp"

namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;
using rudder::ModelError;
using rudder::nn::BidirectionalLlm;

constexpr int64_t kEos = 280, kMask = 281, kTokenizerVocab = 282, kNetworkVocab = 288;

class BidirectionalLlmCheckpoint : public rudder::test::GeneratedCheckpoints {
protected:
    static void SetUpTestSuite() { generate(RUDDER_BIDIRECTIONAL_LLM_FIXTURE, "rudder_bidirectional_llm_test"); }
    // The message of the ModelError loading `dir` throws ("" if it loads).
    static std::string load_error(const fs::path& dir) {
        try {
            BidirectionalLlm::load(dir);
        } catch (const ModelError& e) {
            return e.what();
        }
        return "";
    }
    // A copy of `name` whose config.json has `key` set to `value` (null removes it).
    static fs::path with_config(const std::string& name, const std::string& as, const std::string& key,
                                const json& value) {
        const fs::path dir = copy_of(name, as);
        json config = rudder::read_json_file(dir / "config.json");
        if (value.is_null())
            config.erase(key);
        else
            config[key] = value;
        write_json(dir / "config.json", config);
        return dir;
    }
};

using rudder::test::max_difference;

TEST_F(BidirectionalLlmCheckpoint, LladaAndDreamMatchTheReferenceForward) {
    for (const std::string name : {"llada", "dream"}) {
        SCOPED_TRACE(name);
        const BidirectionalLlm net = BidirectionalLlm::load(root_ / name);
        EXPECT_EQ(net.config().vocab_size, kNetworkVocab);
        EXPECT_EQ(net.config().n_kv_heads, 2);
        EXPECT_EQ(net.config().shifted(), name == "dream");
        const at::Tensor tokens = reference(name + ".tokens");
        const at::Tensor logits = net.forward(tokens);
        ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{3, 20, kNetworkVocab}));
        EXPECT_LT(max_difference(logits, reference(name + ".logits")), 1e-4);
        const at::Tensor logp = net.clean_log_probs(tokens, kTokenizerVocab);
        ASSERT_EQ(logp.sizes(), (std::vector<int64_t>{3, 20, kTokenizerVocab}));
        EXPECT_LT(max_difference(logp, reference(name + ".clean_log_probs")), 1e-4);
        // Distributions over the tokenizer's ids at masked positions; certain of the token elsewhere.
        EXPECT_LT((logp.exp().sum(-1) - 1).abs().max().item<double>(), 1e-5);
        EXPECT_EQ(logp.select(-1, kMask).max().item<float>(), rudder::nn::kImpossibleLogProb);
    }
}

// Fast-dLLM's key/value caches: a window of positions run against the keys and values a full forward kept gives,
// while no token changed, the full forward's logits there (prefix: a window to the end; dual: one in the middle),
// and the outside rows with the vocabulary's give the softmax over every row.
TEST_F(BidirectionalLlmCheckpoint, WindowsOfAKeyValueCacheGiveTheFullForwardWhileNothingChanged) {
    const BidirectionalLlm net = BidirectionalLlm::load(root_ / "llada");
    const at::Tensor tokens = reference("llada.tokens");
    rudder::nn::KeyValueCache cache;
    const at::Tensor full = net.forward(tokens, &cache);
    EXPECT_EQ(cache.length, 20);
    ASSERT_EQ(cache.keys.size(), 2u);
    EXPECT_EQ(cache.keys[0].sizes(), (std::vector<int64_t>{3, 2, 20, 16}));  // one per key/value head
    for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{{6, 20}, {4, 12}, {0, 20}}) {
        SCOPED_TRACE(std::to_string(begin) + ".." + std::to_string(end));
        const at::Tensor window = net.forward_window(tokens.narrow(1, begin, end - begin), begin, cache);
        EXPECT_LT(max_difference(window, full.narrow(1, begin, end - begin)), 1e-4);
    }
    // The window's log-probabilities are clean_log_probs' at its masked positions, outside rows included, and
    // with them the softmax over every row of the full forward.
    const auto every_row = [](const at::Tensor& logp, const at::Tensor& outside) {
        return at::log_softmax(at::cat({logp.narrow(-1, 0, kMask), outside.narrow(-1, 0, 1),
                                        logp.narrow(-1, kMask + 1, kTokenizerVocab - kMask - 1),
                                        outside.narrow(-1, 1, kNetworkVocab - kTokenizerVocab)},
                                       -1),
                               -1);
    };
    at::Tensor outside;
    const at::Tensor logp = net.clean_log_probs(tokens, kTokenizerVocab, &outside);
    ASSERT_EQ(outside.sizes(), (std::vector<int64_t>{3, 20, 1 + kNetworkVocab - kTokenizerVocab}));
    const at::Tensor masked = tokens.eq(kMask);  // (meaningful where masked)
    ASSERT_GT(masked.sum().item<int64_t>(), 5);
    EXPECT_LT(max_difference(every_row(logp, outside).index({masked}), at::log_softmax(full, -1).index({masked})),
              1e-4);
    for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{{6, 20}, {4, 12}}) {
        at::Tensor window_outside;
        const at::Tensor window = net.clean_log_probs_window(tokens.narrow(1, begin, end - begin), begin, cache,
                                                             kTokenizerVocab, &window_outside);
        const at::Tensor in_window = masked.narrow(1, begin, end - begin);
        EXPECT_LT(max_difference(window.index({in_window}), logp.narrow(1, begin, end - begin).index({in_window})),
                  1e-4);
        EXPECT_LT(
            max_difference(window_outside.index({in_window}), outside.narrow(1, begin, end - begin).index({in_window})),
            1e-4);
        EXPECT_TRUE(at::equal(window.index({in_window.logical_not()}),
                              logp.narrow(1, begin, end - begin).index({in_window.logical_not()})));
    }
    EXPECT_THROW(net.forward_window(tokens.narrow(1, 0, 4), 18, cache), std::invalid_argument);
    // Dream shifts within the window, as Fast-dLLM's code does: every row but the window's first is the full
    // forward's.
    const BidirectionalLlm dream = BidirectionalLlm::load(root_ / "dream");
    rudder::nn::KeyValueCache dream_cache;
    const at::Tensor dream_full = dream.forward(tokens, &dream_cache);
    const at::Tensor window = dream.forward_window(tokens.narrow(1, 4, 8), 4, dream_cache);
    EXPECT_LT(max_difference(window.narrow(1, 1, 7), dream_full.narrow(1, 5, 7)), 1e-4);
}

// A 16-bit matrix is widened a slice of rows at a time: the product, its bias and the last, shorter slice are those of
// the matrix widened whole.
TEST(LinearWidening, SlicesOfA16BitMatrixGiveTheWholeProduct) {
    at::manual_seed(3);
    const at::Tensor x = at::randn({2, 5, 64}), bias = at::randn({300});
    for (const auto dtype : {at::kBFloat16, at::kHalf}) {
        const at::Tensor w = at::randn({300, 64}).to(dtype);
        const at::Tensor whole = at::linear(x, w.to(at::kFloat), bias);
        for (const int64_t slice : {int64_t{64 * 64}, int64_t{1} << 20}) {  // 64 rows a slice (5 slices), or one
            // (0 rows in registers: always by slices)
            EXPECT_LT(max_difference(rudder::nn::linear_widening(x, w, bias, slice, 0), whole), 1e-5);
            EXPECT_LT(max_difference(rudder::nn::linear_widening(x, w, {}, slice, 0), at::linear(x, w.to(at::kFloat))),
                      1e-5);
        }
    }
}

// Few positions on a CPU with AVX2 (or AVX-512): the product widens each weight in a register. Every shape's edge (1 to
// 4 positions and 46, inner sizes that are not a multiple of eight or run over one chunk of 512, rows past a panel of
// 64 and not a multiple of four) gives the float64 product of the widened matrix; each position's output is bit for bit
// the same whatever positions are computed beside it (an output layer run on a step's masked positions only); with more
// positions than `most_rows_in_registers`, the slices give the same.
TEST(LinearWidening, ProductsInRegistersGiveTheWidenedMatrixsProductWhateverRowsAreComputedTogether) {
    if (!rudder::nn::products_in_registers()) GTEST_SKIP() << "this CPU has no AVX2, FMA and F16C";
    at::manual_seed(11);
    for (const int64_t K : {37, 600, 1100}) {
        const at::Tensor w = at::randn({301, K}), bias = at::randn({301});
        const rudder::nn::HeldMatrix int8 = rudder::nn::quantize_rows_int8(w);
        const std::vector<std::pair<std::string, rudder::nn::HeldMatrix>> held = {
            {"bfloat16", w.to(at::kBFloat16)}, {"float16", w.to(at::kHalf)}, {"int8", int8}};
        for (const auto& [name, matrix] : held) {
            SCOPED_TRACE(name + ", K " + std::to_string(K));
            const at::Tensor widened =
                matrix.is_int8() ? matrix.values.to(at::kDouble) * matrix.row_scales.to(at::kDouble).unsqueeze(1)
                                 : matrix.values.to(at::kDouble);
            const at::Tensor x = at::randn({46, K});
            const at::Tensor exact = at::linear(x.to(at::kDouble), widened, bias.to(at::kDouble));
            const at::Tensor all = rudder::nn::linear_widening(x, matrix, bias);
            const double scale = exact.abs().max().item<double>();
            EXPECT_LT(max_difference(all.to(at::kDouble), exact) / scale, 1e-5);
            EXPECT_LT(max_difference(rudder::nn::linear_widening(x, matrix, bias, int64_t{1} << 20, 8), all) / scale,
                      1e-5);  // 46 positions over 8: by slices
            for (const int64_t M : {1, 2, 3, 4}) {
                const at::Tensor rows = at::randperm(46, at::kLong).narrow(0, 0, M);
                EXPECT_TRUE(at::equal(rudder::nn::linear_widening(x.index_select(0, rows), matrix, bias),
                                      all.index_select(0, rows)))
                    << M << " positions";
            }
        }
    }
}

// Each instruction set's kernel this CPU has (AVX2's eight lanes, AVX-512's sixteen), called directly on a share of
// the weight rows of each stored type: the float64 product of the widened matrix, with rows of activations left over
// from every block height (1 to 9) and shares that start mid-matrix.
TEST(LinearWidening, EachInstructionSetsKernelGivesTheWidenedMatrixsProduct) {
    namespace rp = rudder::nn::row_products;
    if (!rp::available()) GTEST_SKIP() << "this CPU has no AVX2, FMA and F16C";
    std::vector<std::pair<std::string, decltype(&rp::isa::avx2)>> kernels = {{"avx2", &rp::isa::avx2}};
    if (rp::avx512_available()) kernels.emplace_back("avx512", &rp::isa::avx512);
    at::manual_seed(12);
    const int64_t N = 203, K = 1043, first = 17, last = 190;
    const at::Tensor w = at::randn({N, K});
    const std::vector<std::tuple<std::string, at::Tensor, rp::Weights>> stored = {
        {"bfloat16", w.to(at::kBFloat16), rp::Weights::bfloat16},
        {"float16", w.to(at::kHalf), rp::Weights::float16},
        {"int8", w.mul(20).round().clamp(-127, 127).to(at::kChar), rp::Weights::int8}};
    for (const auto& [name, kernel] : kernels)
        for (const auto& [type, values, weights] : stored)
            for (const int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 9}) {
                SCOPED_TRACE(name + ", " + type + ", " + std::to_string(M) + " rows");
                const at::Tensor x = at::randn({M, K});
                at::Tensor out = at::full({M, last - first}, std::nan(""));
                kernel(x.data_ptr<float>(), M, K, values.data_ptr(), weights, first, last, out.data_ptr<float>(),
                       last - first);
                const at::Tensor exact =
                    at::mm(x.to(at::kDouble), values.narrow(0, first, last - first).to(at::kDouble).t());
                EXPECT_LT(max_difference(out.to(at::kDouble), exact) / exact.abs().max().item<double>(), 1e-5);
            }
}

// Weight-only int8 (per row, symmetric): every weight within half its row's scale, a row of zeros kept exactly; the
// products and embedding rows are those of the dequantised matrix, by slices or whole, from float32 or bfloat16.
TEST(HeldMatrix, Int8RowsHoldEachWeightWithinHalfAScaleAndMultiplyAsTheirDequantisedMatrix) {
    at::manual_seed(5);
    const at::Tensor x = at::randn({2, 5, 64}), bias = at::randn({300});
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
        SCOPED_TRACE(c10::toString(dtype));
        at::Tensor w = at::randn({300, 64}) * at::rand({300, 1}) * 3;
        w[7].zero_();
        w = w.to(dtype);
        const rudder::nn::HeldMatrix held = rudder::nn::quantize_rows_int8(w, 64 * 64);  // 5 slices of rows
        ASSERT_TRUE(held.is_int8());
        EXPECT_EQ(held.values.scalar_type(), at::kChar);
        EXPECT_TRUE(held.values.equal(rudder::nn::quantize_rows_int8(w).values));  // the slices change nothing
        const at::Tensor wf = w.to(at::kFloat);
        at::Tensor scales = wf.abs().amax(1) / 127;
        scales[7] = 1;
        EXPECT_LT(max_difference(held.row_scales, scales), 1e-7);
        EXPECT_EQ(held.row_scales[7].item<float>(), 1.0f);
        EXPECT_EQ(held.values[7].abs().max().item<int>(), 0);
        EXPECT_EQ(held.values.abs().amax(1).narrow(0, 0, 7).min().item<int>(), 127);  // each row's largest is +-127
        const at::Tensor dequantised = held.values.to(at::kFloat) * held.row_scales.unsqueeze(1);
        EXPECT_LT(((dequantised - wf).abs() / held.row_scales.unsqueeze(1)).max().item<double>(), 0.5 + 1e-4);
        for (const int64_t slice : {int64_t{64 * 64}, int64_t{1} << 20}) {
            EXPECT_LT(
                max_difference(rudder::nn::linear_widening(x, held, bias, slice, 0), at::linear(x, dequantised, bias)),
                1e-4);
            EXPECT_LT(max_difference(rudder::nn::linear_widening(x, held, {}, slice, 0), at::linear(x, dequantised)),
                      1e-4);
        }
        EXPECT_LT(max_difference(rudder::nn::linear_widening(x, held, bias), at::linear(x, dequantised, bias)), 1e-4);
        const at::Tensor ids = at::tensor({7, 0, 299, 42}, at::kLong).view({2, 2});
        EXPECT_LT(max_difference(rudder::nn::embedding_rows(held, ids), at::embedding(dequantised, ids)), 1e-7);
    }
    EXPECT_THROW(rudder::nn::quantize_rows_int8(at::zeros({4}, at::kFloat)), std::invalid_argument);
}

// A network quantised to int8 stays close to its float32 forward: the logits within 2% of their range, the arg-max
// the same at nearly every position (the fixtures' random weights); quantising twice changes nothing.
TEST_F(BidirectionalLlmCheckpoint, Int8WeightsStayCloseToTheFloat32Forward) {
    for (const std::string name : {"llada", "dream"}) {
        SCOPED_TRACE(name);
        BidirectionalLlm net = BidirectionalLlm::load(root_ / name);
        const at::Tensor tokens = reference(name + ".tokens");
        const at::Tensor exact = net.forward(tokens);
        net.quantize_int8();
        EXPECT_EQ(net.embedding_dtype(), at::kChar);
        const at::Tensor quantised = net.forward(tokens);
        const double range = (exact.max() - exact.min()).item<double>();
        const double worst = max_difference(quantised, exact);
        EXPECT_LT(worst / range, 0.02) << worst << " of " << range;
        EXPECT_GT(worst, 0.0) << "nothing was quantised";
        const double same = quantised.argmax(-1).eq(exact.argmax(-1)).to(at::kFloat).mean().item<double>();
        EXPECT_GE(same, 0.9);
        net.quantize_int8();
        EXPECT_TRUE(net.forward(tokens).equal(quantised));

        // A recipe's "weights": "int8" runs the model so, under hard constraints.
        rudder::plugins::Registry registry({fs::path(RUDDER_TEST_PLUGIN_DIR)});
        const std::string recipe = R"({"model": ")" + (root_ / name).string() + R"(", "max_length": 16,
            "weights": "int8", "samples": 2, "seed": 2, "sampler": {"name": ")" +
                                   name + R"(", "steps": 8},
            "controllers": [{"plugin": "span", "params": {"prefix": "the cat"}},
                            {"plugin": "length", "params": {"tokens": 7}}]})";
        rudder::Generator generator(rudder::parse_recipe(recipe, "."), registry);
        for (const auto& s : generator.generate()) {
            EXPECT_EQ(s.text.rfind("the cat", 0), 0u) << s.text;
            EXPECT_EQ(s.n_tokens, 7) << s.text;
        }
    }
}

// A bfloat16 checkpoint's matrices stay as stored, over the mapped file, and are widened one at a time as the forward
// uses them: the outputs are the float64 reference's all the same.
TEST_F(BidirectionalLlmCheckpoint, Bfloat16MatricesStayAsStoredAndAreWidenedAtUse) {
    const BidirectionalLlm net = BidirectionalLlm::load(root_ / "llada_bf16");
    EXPECT_EQ(net.embedding_dtype(), at::kBFloat16);
    EXPECT_EQ(BidirectionalLlm::load(root_ / "llada").embedding_dtype(), at::kFloat);
    EXPECT_LT(max_difference(net.forward(reference("llada_bf16.tokens")), reference("llada_bf16.logits")), 1e-4);
    EXPECT_EQ(net.config().rope_theta, 10000.0);
}

TEST_F(BidirectionalLlmCheckpoint, RecognisesBothConfigsAndNotOthers) {
    EXPECT_TRUE(rudder::nn::is_bidirectional_llm_config(rudder::read_json_file(root_ / "llada" / "config.json")));
    EXPECT_TRUE(rudder::nn::is_bidirectional_llm_config(rudder::read_json_file(root_ / "dream" / "config.json")));
    EXPECT_FALSE(rudder::nn::is_bidirectional_llm_config(json{{"model_type", "qwen2"}}));
    EXPECT_FALSE(rudder::nn::is_bidirectional_llm_config(json{{"format_version", 1}, {"model_type", "llada"}}));
}

TEST_F(BidirectionalLlmCheckpoint, RefusesConfigsItDoesNotRunNamingTheField) {
    const struct {
        std::string model, key;
        json value;
        std::string expected;
    } cases[] = {
        {"llada", "block_type", "sequential", "field 'block_type': only \"llama\" is supported"},
        {"llada", "alibi", true, "field 'alibi': only false is supported (rotary positions, not ALiBi)"},
        {"llada", "rope_scaling_typo", 1, "field 'rope_scaling_typo': unknown field"},
        {"llada", "n_kv_heads", 3, "field 'n_kv_heads': must divide the number of query heads (4)"},
        {"llada", "mask_token_id", 999, "field 'mask_token_id': 999 is not an id of the 288 tokens"},
        {"llada", "d_model", nullptr, "field 'd_model': missing (a positive integer)"},
        {"dream", "rope_scaling", json{{"type", "yarn"}}, "field 'rope_scaling': only null is supported"},
        {"dream", "hidden_act", "gelu", "field 'hidden_act': only \"silu\" is supported"},
        {"dream", "use_sliding_window", true, "field 'use_sliding_window': only false is supported"},
        {"dream", "num_attention_heads", 5, "field 'num_attention_heads': the hidden size must split into heads"},
    };
    int index = 0;
    for (const auto& c : cases) {
        SCOPED_TRACE(c.model + " " + c.key);
        const fs::path dir = with_config(c.model, "bad_config_" + std::to_string(index++), c.key, c.value);
        const std::string error = load_error(dir);
        EXPECT_NE(error.find((dir / "config.json").string()), std::string::npos) << error;
        EXPECT_NE(error.find(c.expected), std::string::npos) << error;
    }
}

// A layer count or a width the weights cannot hold is refused from the weights files' sizes, before the shapes of a
// billion layers are listed (which took minutes and gigabytes before the weights were opened).
TEST_F(BidirectionalLlmCheckpoint, RefusesSizesTheWeightsCannotHoldBeforeAllocating) {
    const struct {
        std::string model, key;
        json value;
        std::string expected;
    } cases[] = {
        {"llada", "n_layers", 1000000000, "field 'n_layers': 1000000000 layers of these sizes make "},
        {"dream", "num_hidden_layers", 1000000000, "field 'num_hidden_layers': 1000000000 layers of these sizes make "},
        {"dream", "intermediate_size", 2000000000, "field 'num_hidden_layers': "},
        {"llada", "d_model", int64_t{1} << 40, "field 'd_model': expected a positive integer up to 2147483647"},
    };
    int index = 0;
    for (const auto& c : cases) {
        SCOPED_TRACE(c.model + " " + c.key);
        const fs::path dir = with_config(c.model, "too_large_" + std::to_string(index++), c.key, c.value);
        const std::string error = load_error(dir);
        EXPECT_NE(error.find((dir / "config.json").string()), std::string::npos) << error;
        EXPECT_NE(error.find(c.expected), std::string::npos) << error;
        if (c.key == "d_model") continue;  // refused by its bound, before any count
        EXPECT_NE(error.find("layers of these sizes make"), std::string::npos) << error;
        const std::string holder = c.model == "llada" ? ", but model.safetensors holds "
                                                      : ", but the 2 shards model.safetensors.index.json names hold ";
        EXPECT_NE(error.find(holder), std::string::npos) << error;
    }
}

TEST_F(BidirectionalLlmCheckpoint, RefusesMissingWrongAndExtraTensors) {
    const BidirectionalLlm reference_net = BidirectionalLlm::load(root_ / "llada");
    const rudder::SafeTensors weights = rudder::load_safetensors(root_ / "llada" / "model.safetensors");
    auto rewritten = [&](const std::string& as, const std::string& drop, const std::string& reshape,
                         const std::string& add) {
        const fs::path dir = copy_of("llada", as);
        std::vector<std::pair<std::string, at::Tensor>> tensors;
        for (const auto& [name, t] : weights.tensors) {
            if (name == drop) continue;
            tensors.emplace_back(name, name == reshape ? t.reshape({-1}) : t);
        }
        if (!add.empty()) tensors.emplace_back(add, at::zeros({2}));
        rudder::save_safetensors(dir / "model.safetensors", tensors);
        return load_error(dir);
    };
    std::string error = rewritten("missing", "model.transformer.blocks.1.up_proj.weight", "", "");
    EXPECT_NE(error.find("missing tensor 'model.transformer.blocks.1.up_proj.weight'"), std::string::npos) << error;
    error = rewritten("reshaped", "", "model.transformer.blocks.0.k_proj.weight", "");
    EXPECT_NE(
        error.find("tensor 'model.transformer.blocks.0.k_proj.weight' has shape [2048], the config implies [32, 64]"),
        std::string::npos)
        << error;
    error = rewritten("extra", "", "", "model.transformer.blocks.0.q_proj.bias");
    EXPECT_NE(error.find("unexpected tensor 'model.transformer.blocks.0.q_proj.bias' (not part of the LLaDA network"),
              std::string::npos)
        << error;
    // The same bias is expected once the config says the projections have one.
    const fs::path biased = with_config("llada", "biased", "include_qkv_bias", true);
    error = load_error(biased);
    EXPECT_NE(error.find("missing tensor 'model.transformer.blocks"), std::string::npos) << error;
    EXPECT_NE(error.find("_proj.bias"), std::string::npos) << error;
}

TEST_F(BidirectionalLlmCheckpoint, ModelLoadingAsksForTheTokenizerAndRefusesTheContinuousFamily) {
    const fs::path bare = copy_of("dream", "dream_without_tokenizer");
    fs::remove(bare / "tokenizer.json");
    try {
        rudder::load_model(bare, std::nullopt);
        ADD_FAILURE() << "a Dream checkpoint loaded without its tokenizer";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("is a Dream checkpoint without its tokenizer.json"), std::string::npos)
            << e.what();
    }
    try {
        rudder::load_model(root_ / "llada", rudder::Family::continuous);
        ADD_FAILURE() << "a LLaDA checkpoint loaded as a continuous model";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("not a continuous one"), std::string::npos) << e.what();
    }
    const fs::path wrong_mask = with_config("llada", "llada_mask_past_tokenizer", "mask_token_id", 285);
    try {
        rudder::load_model(wrong_mask, std::nullopt);
        ADD_FAILURE() << "a mask id past the tokenizer was accepted";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("field 'mask_token_id': 285 is not a token of"), std::string::npos)
            << e.what();
    }
}

// `rudder models DIR` describes both from their configs and weights' headers (Dream's sharded): the authors' sampler.
TEST_F(BidirectionalLlmCheckpoint, DescriptionNamesTheArchitectureSamplerAndWeights) {
    for (const std::string name : {"llada", "dream"}) {
        SCOPED_TRACE(name);
        const json d = rudder::describe_model(root_ / name);
        EXPECT_EQ(d["kind"].get<std::string>().rfind(name == "llada" ? "LLaDA" : "Dream", 0), 0u) << d.dump();
        EXPECT_EQ(d["recommended_sampler"]["name"], name);
        if (name == "dream") {
            EXPECT_EQ(d["recommended_sampler"]["alg"], "entropy");
        }
        EXPECT_EQ(d["tokenizer"], "byte-level BPE, tokenizer.json");
        const rudder::Model model = rudder::load_model(root_ / name, std::nullopt);
        EXPECT_EQ(d["recommended_sampler"], model.recommended_sampler);
        EXPECT_GT(d["weights"]["parameters"].get<int64_t>(), 0);
        EXPECT_FALSE(d["weights"]["files"].empty());
    }
}

// The mask and the end-of-text token come from the config, the texts end at the end-of-text token (the pad), and a
// recipe samples both models with the confidence sampler they are used with, with a prefix, an exact length and
// banned words (byte-level BPE spells each several ways, some of one token, some of several).
TEST_F(BidirectionalLlmCheckpoint, ACheckpointIsAModelThatARecipeSamplesWithHardConstraints) {
    rudder::plugins::Registry registry({fs::path(RUDDER_TEST_PLUGIN_DIR)});
    for (const std::string name : {"llada", "dream"}) {
        SCOPED_TRACE(name);
        const fs::path dir = root_ / name;
        const rudder::Model model = rudder::load_model(dir, std::nullopt);
        EXPECT_EQ(model.family, rudder::Family::discrete);
        EXPECT_EQ(model.tokenizer->vocab_size(), kTokenizerVocab);
        EXPECT_EQ(model.denoiser->vocab_size(), kTokenizerVocab);
        EXPECT_EQ(model.tokenizer->mask_id(), kMask);
        EXPECT_EQ(model.tokenizer->pad_id(), kEos);
        EXPECT_EQ(model.tokenizer->token(kMask), name == "llada" ? "<|mdm_mask|>" : "<|mask|>");
        EXPECT_EQ(model.recommended_sampler.at("name"), name);
        std::vector<int64_t> ids = model.tokenizer->encode("the cat sat near the river");
        EXPECT_EQ(model.tokenizer->decode(ids.data(), static_cast<int64_t>(ids.size())), "the cat sat near the river");
        ids.push_back(kEos);
        ids.push_back(ids.front());
        EXPECT_EQ(model.tokenizer->decode(ids.data(), static_cast<int64_t>(ids.size())), "the cat sat near the river")
            << "a text ends at the end-of-text token";

        // With and without prompt guidance (LLaDA's cfg_scale), Rudder's confidence sampler and the authors': the
        // controls hold either way.
        for (const std::string& sampler : {std::string("confidence"), name})
            for (const char* guidance : {"0", "1.5"}) {
                SCOPED_TRACE(sampler + ", prompt_guidance " + guidance);
                const std::string recipe = R"({"model": ")" + dir.string() + R"(", "max_length": 24,
                "sampler": {"name": ")" + sampler +
                                           R"(", "steps": 12, )" +
                                           (sampler == "dream" ? "" : R"("block_length": 8, )") +
                                           R"("prompt_guidance": )" + guidance + R"(}, "samples": 3, "seed": 4,
                "controllers": [{"plugin": "span", "params": {"prefix": "the cat"}},
                                {"plugin": "length", "params": {"tokens": 9}},
                                {"plugin": "exclude_words", "params": {"words": ["dog", "sat", "food"]}}]})";
                rudder::Generator generator(rudder::parse_recipe(recipe, "."), registry);
                const auto samples = generator.generate();
                ASSERT_EQ(samples.size(), 3u);
                const std::vector<int64_t> prefix = model.tokenizer->encode("the cat");
                for (const auto& s : samples) {
                    ASSERT_EQ(s.tokens.size(), 24u);
                    EXPECT_EQ(s.n_tokens, 9) << s.text;
                    EXPECT_TRUE(std::none_of(s.tokens.begin(), s.tokens.end(), [](int64_t id) { return id == kMask; }))
                        << s.text;
                    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), s.tokens.begin())) << s.text;
                    EXPECT_EQ(s.text, model.tokenizer->decode(s.tokens.data(), 24));
                    EXPECT_EQ(s.text.rfind("the cat", 0), 0u) << s.text;
                    for (const char* word : {"dog", "sat", "food"})
                        EXPECT_EQ(s.text.find(word), std::string::npos) << s.text;
                    ASSERT_EQ(s.controls.size(), 3u);
                    for (const auto& control : s.controls)
                        EXPECT_EQ(control.verdict.satisfied, 1) << control.label << ": " << s.text;
                }
            }
        // A controller that only forbids (no position fixed) with the authors' sampler: the rows it restricts draw no
        // mask, and nothing is left masked.
        const std::string forbids_only = R"({"model": ")" + dir.string() + R"(", "max_length": 12, "samples": 2,
            "seed": 1, "controllers": [{"plugin": "exclude_words", "params": {"words": ["dog"]}}]})";
        rudder::Generator generator(rudder::parse_recipe(forbids_only, "."), registry);
        for (const auto& s : generator.generate()) {
            EXPECT_TRUE(std::none_of(s.tokens.begin(), s.tokens.end(), [](int64_t id) { return id == kMask; }))
                << s.text;
            EXPECT_EQ(s.controls.at(0).verdict.satisfied, 1) << s.text;
        }
    }
}

// The authors' samplers write the tokens LLaDA's generate() and Dream's diffusion_generate() write at temperature 0
// (authors_samplers_reference.py, over the fixture's float64 network): LLaDA with several prompt / gen_length /
// block_length / steps settings (its defaults scaled down among them), low-confidence and random remasking (the
// random numbers drawn as LLaDA draws them, from the same seed), and classifier-free guidance; Dream with each alg
// (origin's positions drawn as Dream draws them), and with top_p and top_k; and Fast-dLLM's threshold and factor rules
// on LLaDA (as its generate() without caches), its prefix and dual key/value caches, and its Dream block decoding.
TEST_F(BidirectionalLlmCheckpoint, TheAuthorsSamplersWriteTheAuthorsTokens) {
    struct Case {
        std::string flavor, prompt;
        int64_t gen_length, seed;
        json sampler;
    };
    const std::vector<Case> cases = {
        // LLaDA's own example, scaled down: steps 4, 16 tokens in blocks of 4 after the prompt.
        {"llada", "the cat sat near the river", 16, 1, {{"name", "llada"}, {"steps", 4}, {"block_length", 4}}},
        // Its defaults (steps = gen_length = block_length), at 16.
        {"llada", "the cat", 16, 2, {{"name", "llada"}, {"steps", 16}, {"block_length", 16}}},
        {"llada", "a dog", 24, 3, {{"name", "llada"}, {"steps", 12}, {"block_length", 8}}},
        {"llada", "the river", 16, 4, {{"name", "llada"}, {"steps", 8}, {"block_length", 8}, {"remasking", "random"}}},
        {"llada", "the cat", 12, 5, {{"name", "llada"}, {"steps", 6}, {"block_length", 4}, {"prompt_guidance", 1.0}}},
        // Fast-dLLM's parallel decoding (threshold, factor): the random network is unsure of everything, so the low
        // thresholds are the ones that commit several positions a step.
        {"llada", "the cat", 16, 1, {{"name", "llada"}, {"block_length", 4}, {"threshold", 0.9}}},
        {"llada", "a dog", 24, 1, {{"name", "llada"}, {"block_length", 8}, {"threshold", 0.02}}},
        {"llada", "a dog", 24, 1, {{"name", "llada"}, {"block_length", 8}, {"factor", 1.0}}},
        {"llada", "the river", 16, 1, {{"name", "llada"}, {"block_length", 4}, {"factor", 1.97}}},
        // Fast-dLLM's key/value caches: every position at a block's first step, then the block's window.
        {"llada", "the cat sat", 16, 1, {{"name", "llada"}, {"steps", 8}, {"block_length", 4}, {"kv_cache", "prefix"}}},
        {"llada", "the cat sat", 16, 1, {{"name", "llada"}, {"steps", 8}, {"block_length", 4}, {"kv_cache", "dual"}}},
        {"llada", "a dog", 24, 1, {{"name", "llada"}, {"steps", 24}, {"block_length", 8}, {"kv_cache", "dual"}}},
        // Fast-dLLM's Dream block decoding: with its prefix and dual caches, with a threshold, and without a cache.
        {"dream", "the cat sat", 16, 1, {{"name", "dream"}, {"steps", 8}, {"block_length", 4}, {"kv_cache", "prefix"}}},
        {"dream", "the cat sat", 16, 1, {{"name", "dream"}, {"steps", 8}, {"block_length", 4}, {"kv_cache", "dual"}}},
        {"dream",
         "a dog",
         24,
         1,
         {{"name", "dream"}, {"steps", 12}, {"block_length", 8}, {"kv_cache", "dual"}, {"threshold", 0.02}}},
        {"dream", "the river", 16, 1, {{"name", "dream"}, {"steps", 8}, {"block_length", 8}}},
        {"dream", "the cat sat", 16, 6, {{"name", "dream"}, {"steps", 8}, {"alg", "origin"}}},
        {"dream", "the cat sat", 16, 7, {{"name", "dream"}, {"steps", 8}, {"alg", "maskgit_plus"}}},
        {"dream", "a dog", 20, 8, {{"name", "dream"}, {"steps", 6}, {"alg", "topk_margin"}}},
        {"dream", "the river", 16, 9, {{"name", "dream"}, {"steps", 16}, {"alg", "entropy"}}},
        {"dream",
         "the cat",
         16,
         10,
         {{"name", "dream"}, {"steps", 5}, {"alg", "entropy"}, {"top_p", 0.9}, {"top_k", 40}}},
    };
    rudder::plugins::Registry registry({fs::path(RUDDER_TEST_PLUGIN_DIR)});
    json inputs = json::array();
    std::vector<std::vector<int64_t>> ours;
    for (const Case& c : cases) {
        const fs::path dir = root_ / c.flavor;
        const std::vector<int64_t> prompt = rudder::load_model(dir, std::nullopt).tokenizer->encode(c.prompt);
        const json recipe = {{"model", dir.string()},
                             {"max_length", static_cast<int64_t>(prompt.size()) + c.gen_length},
                             {"seed", c.seed},
                             {"sampler", c.sampler},
                             {"controllers", {{{"plugin", "span"}, {"params", {{"prefix", c.prompt}}}}}}};
        rudder::Generator generator(rudder::parse_recipe(recipe.dump(), "."), registry);
        ours.push_back(generator.generate().at(0).tokens);
        inputs.push_back({{"dir", dir.string()},
                          {"flavor", c.flavor},
                          {"prompt", prompt},
                          {"seed", c.seed},
                          {"sampler", c.sampler},
                          {"gen_length", c.gen_length}});
    }
    write_json(root_ / "authors_cases.json", inputs);
    const std::string command = std::string(RUDDER_PYTHON3) + " " + RUDDER_AUTHORS_SAMPLERS_REFERENCE + " " +
                                (root_ / "authors_cases.json").string() + " " +
                                (root_ / "authors_tokens.json").string() + " > " + (root_ / "authors.log").string() +
                                " 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << "see " << (root_ / "authors.log").string();
    const json theirs = rudder::read_json_file(root_ / "authors_tokens.json");
    ASSERT_EQ(theirs.size(), cases.size());
    for (size_t k = 0; k < cases.size(); ++k)
        EXPECT_EQ(ours[k], theirs[k].get<std::vector<int64_t>>()) << cases[k].flavor << " " << cases[k].sampler.dump();
}

}  // namespace
