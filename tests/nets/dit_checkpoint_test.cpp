// MDLM, SEDD, UDLM and DUO checkpoints in Hugging Face layout (nn/dit_checkpoint.hpp): tiny random-weight checkpoints
// written by dit_checkpoint_fixture.py with the public checkpoints' tensor names, shapes and config fields, loaded here
// and compared with that script's plain-PyTorch (float64) forward of the same network; then the files each refusal
// names. Skips, saying why, where python3-torch is missing.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>
#include <algorithm>

#include <rudder/nn/denoiser_net.hpp>
#include <rudder/nn/dit_checkpoint.hpp>
#include <rudder/nn/safetensors.hpp>
#include <rudder/plugins/plugins.hpp>
#include <rudder/runtime/generator.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/runtime/recipe.hpp>

#include "dit_checkpoint_denoiser.hpp"
#include "generated_checkpoints.hpp"

namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;
using rudder::ModelError;
using rudder::nn::DitNetwork;

class DitCheckpoint : public rudder::test::GeneratedCheckpoints {
protected:
    static void SetUpTestSuite() { generate(RUDDER_DIT_FIXTURE, "rudder_dit_test"); }

    // A copy of the fixture's checkpoint `name` as `as`, with the GPT-2-like tokenizer's files beside it.
    static fs::path copy_with_tokenizer(const std::string& name, const std::string& as) {
        const fs::path dir = copy_of(name, as);
        for (const char* file : {"vocab.json", "merges.txt"})
            fs::copy(root_ / "gpt2_like_tokenizer" / file, dir / file);
        return dir;
    }

    // What tests/nets/dit_samplers_reference.py writes for `cases` (its CASES.json), the files named after `name`; an
    // empty array (and a failure) if it cannot run.
    static json samplers_reference(const std::string& name, const json& cases) {
        write_json(root_ / (name + "_cases.json"), cases);
        const fs::path log = root_ / (name + "_reference.log");
        const std::string command = std::string(RUDDER_PYTHON3) + " " + RUDDER_DIT_SAMPLERS_REFERENCE + " " +
                                    (root_ / (name + "_cases.json")).string() + " " +
                                    (root_ / (name + "_tokens.json")).string() + " > " + log.string() + " 2>&1";
        if (std::system(command.c_str()) != 0) {
            ADD_FAILURE() << "see " << log.string();
            return json::array();
        }
        return rudder::read_json_file(root_ / (name + "_tokens.json"));
    }
};

using rudder::test::max_difference;

std::string load_error(const fs::path& dir) {
    try {
        DitNetwork::load(dir);
    } catch (const ModelError& e) {
        return e.what();
    }
    return "(loaded)";
}

// What every sample of a constrained run on the tiny checkpoints (16 positions) must be: the prefix first, exactly
// `length` tokens, `end` from there to the last position, and none of the `never` ids anywhere.
void expect_prefix_length_and_never(const rudder::SampleResult& s, const std::vector<int64_t>& prefix, int64_t length,
                                    int64_t end, const std::vector<int64_t>& never) {
    ASSERT_EQ(s.tokens.size(), 16u);
    EXPECT_EQ(s.n_tokens, length) << s.text;
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), s.tokens.begin())) << s.text;
    EXPECT_TRUE(std::all_of(s.tokens.begin() + length, s.tokens.end(), [&](int64_t id) { return id == end; }))
        << s.text;
    for (const int64_t id : never)
        EXPECT_TRUE(std::none_of(s.tokens.begin(), s.tokens.end(), [&](int64_t t) { return t == id; }))
            << id << ": " << s.text;
}

// Four samples of the folder's model with `sampler` (8 steps, seed 5) under a prefix, a length and a banned word.
std::vector<rudder::SampleResult> constrained_samples(const fs::path& dir, const std::string& sampler,
                                                      const std::string& prefix, int tokens, const std::string& banned,
                                                      rudder::plugins::Registry& registry) {
    const json recipe = {{"model", dir.string()},
                         {"sampler", {{"name", sampler}, {"steps", 8}}},
                         {"samples", 4},
                         {"seed", 5},
                         {"controllers",
                          {{{"plugin", "span"}, {"params", {{"prefix", prefix}}}},
                           {{"plugin", "length"}, {"params", {{"tokens", tokens}}}},
                           {{"plugin", "exclude_words"}, {"params", {{"words", {banned}}}}}}}};
    rudder::Generator generator(rudder::parse_recipe(recipe.dump(), "."), registry);
    return generator.generate();
}

TEST_F(DitCheckpoint, MdlmMatchesTheReferenceForward) {
    for (const std::string name : {"mdlm", "mdlm_time_sharded"}) {
        const DitNetwork net = DitNetwork::load(root_ / name);
        EXPECT_EQ(net.config().flavor, rudder::nn::DitFlavor::mdlm);
        EXPECT_EQ(net.config().vocab_size, 300);
        EXPECT_EQ(net.config().time_conditioning, name != "mdlm");
        const at::Tensor tokens = reference(name + ".tokens"), sigma = reference(name + ".sigma");
        const at::Tensor raw = net.forward(tokens, sigma);
        const double raw_diff = max_difference(raw, reference(name + ".raw"));
        const double probs_diff =
            max_difference(net.clean_log_probs(tokens, sigma), reference(name + ".clean_log_probs"));
        std::cout << name << ": max |raw - reference| = " << raw_diff << ", log-probs " << probs_diff << "\n";
        EXPECT_LT(raw_diff, 1e-5) << name;
        EXPECT_LT(probs_diff, 1e-5) << name;
    }
}

TEST_F(DitCheckpoint, MdlmWithoutTimeConditioningIgnoresSigma) {
    const DitNetwork net = DitNetwork::load(root_ / "mdlm");
    const at::Tensor tokens = reference("mdlm.tokens");
    const at::Tensor a = net.forward(tokens, at::full({tokens.size(0)}, 0.01));
    const at::Tensor b = net.forward(tokens, at::full({tokens.size(0)}, 5.0));
    EXPECT_TRUE(at::equal(a, b));
    const DitNetwork timed = DitNetwork::load(root_ / "mdlm_time_sharded");
    EXPECT_GT(max_difference(timed.forward(tokens, at::full({tokens.size(0)}, 0.01)),
                             timed.forward(tokens, at::full({tokens.size(0)}, 5.0))),
              1e-3);
}

TEST_F(DitCheckpoint, SeddMatchesTheReferenceForwardScoreAndMapping) {
    const DitNetwork net = DitNetwork::load(root_ / "sedd");
    EXPECT_EQ(net.config().flavor, rudder::nn::DitFlavor::sedd);
    EXPECT_EQ(net.config().vocab_size, 300);  // tokens + the absorbing state
    EXPECT_TRUE(net.config().scale_by_sigma);
    const at::Tensor tokens = reference("sedd.tokens"), sigma = reference("sedd.sigma");
    const double raw_diff = max_difference(net.forward(tokens, sigma), reference("sedd.raw"));
    const double score_diff = max_difference(net.sedd_log_score(tokens, sigma), reference("sedd.log_score"));
    const double probs_diff = max_difference(net.clean_log_probs(tokens, sigma), reference("sedd.clean_log_probs"));
    std::cout << "sedd: max |raw - reference| = " << raw_diff << ", log score " << score_diff << ", log-probs "
              << probs_diff << "\n";
    EXPECT_LT(raw_diff, 1e-5);
    EXPECT_LT(score_diff, 1e-5);
    EXPECT_LT(probs_diff, 1e-5);
    // The mapping: at masked positions the clean-token distribution is the softmax of the log score over the
    // tokens other than the mask, whatever per-sample offset scale_by_sigma put on it.
    const at::Tensor score = net.sedd_log_score(tokens, sigma);
    const at::Tensor probs = net.clean_log_probs(tokens, sigma);
    const int64_t mask = net.config().mask_id();
    const at::Tensor masked_row = score[1][0].slice(0, 0, mask);
    EXPECT_LT(max_difference(at::log_softmax(masked_row, 0), probs[1][0].slice(0, 0, mask)), 1e-5);
    EXPECT_EQ(probs[1][0][mask].item<float>(), rudder::nn::kImpossibleLogProb);
}

// UDLM and DUO: the same network, uniform noise. Their output is x_theta over every token (no mask); the denoiser
// turns it into the posterior given all of x_t at the log-linear schedule's alpha(t).
TEST_F(DitCheckpoint, UniformNoiseCheckpointsMatchTheReferenceForwardAndPosterior) {
    for (const std::string name : {"udlm", "duo"}) {
        SCOPED_TRACE(name);
        auto net = std::make_shared<DitNetwork>(DitNetwork::load(root_ / name));
        EXPECT_EQ(net->config().flavor, name == "udlm" ? rudder::nn::DitFlavor::udlm : rudder::nn::DitFlavor::duo);
        EXPECT_TRUE(net->config().uniform());
        EXPECT_TRUE(net->config().time_conditioning);
        EXPECT_EQ(net->config().mask_id(), -1);
        const at::Tensor tokens = reference(name + ".tokens"), sigma = reference(name + ".sigma"),
                         t = reference(name + ".t");
        const double raw_diff = max_difference(net->forward(tokens, sigma), reference(name + ".raw"));
        const double probs_diff =
            max_difference(net->clean_log_probs(tokens, sigma), reference(name + ".clean_log_probs"));
        rudder::DitCheckpointDenoiser denoiser(net);
        ASSERT_TRUE(denoiser.traits().uniform_noise.has_value());
        EXPECT_FALSE(denoiser.traits().uniform_noise->geometric());
        double posterior_diff = 0;
        for (int64_t b = 0; b < tokens.size(0); ++b) {
            const at::Tensor row = tokens.narrow(0, b, 1);
            const auto out = denoiser.denoise(row, t[b].item<double>(), {});
            posterior_diff =
                std::max(posterior_diff, max_difference(out.logits, reference(name + ".posterior").narrow(0, b, 1)));
        }
        std::cout << name << ": max |raw - reference| = " << raw_diff << ", x_theta " << probs_diff << ", posterior "
                  << posterior_diff << "\n";
        EXPECT_LT(raw_diff, 1e-5);
        EXPECT_LT(probs_diff, 1e-5);
        EXPECT_LT(posterior_diff, 1e-5);
    }
}

// BD3-LM: MDLM's network with block-causal attention (blocks of 4): the reference agrees, and a position's output
// depends on its own block and the blocks before it only.
TEST_F(DitCheckpoint, Bd3lmMatchesTheReferenceAndSeesNoLaterBlock) {
    const DitNetwork net = DitNetwork::load(root_ / "bd3lm");
    EXPECT_EQ(net.config().flavor, rudder::nn::DitFlavor::bd3lm);
    EXPECT_EQ(net.config().block_size, 4);
    EXPECT_FALSE(net.config().time_conditioning);
    EXPECT_EQ(net.config().mask_id(), 299);
    const at::Tensor tokens = reference("bd3lm.tokens"), sigma = reference("bd3lm.sigma");
    const double raw_diff = max_difference(net.forward(tokens, sigma), reference("bd3lm.raw"));
    const double probs_diff = max_difference(net.clean_log_probs(tokens, sigma), reference("bd3lm.clean_log_probs"));
    std::cout << "bd3lm: max |raw - reference| = " << raw_diff << ", log-probs " << probs_diff << "\n";
    EXPECT_LT(raw_diff, 1e-5);
    EXPECT_LT(probs_diff, 1e-5);
    at::Tensor changed = tokens.clone();
    changed.narrow(1, 8, 4).fill_(5);  // the third block
    const at::Tensor before = net.forward(tokens, sigma), after = net.forward(changed, sigma);
    EXPECT_TRUE(at::equal(before.narrow(1, 0, 8), after.narrow(1, 0, 8))) << "an earlier block saw a later one";
    EXPECT_GT(max_difference(before.narrow(1, 8, 4), after.narrow(1, 8, 4)), 1e-3);
}

// BD3-LM's key/value cache of finished blocks: decoding three rows at different paces (so they sit in different
// blocks at one call), the cached denoiser's current block equals the uncached one's, finished positions carry their
// token, later masked positions have no prediction (uniform), and a changed finished token or another batch size is
// recomputed rather than read from a stale cache.
TEST_F(DitCheckpoint, Bd3lmKeyValueCacheGivesTheUncachedOutputOfEachRowsCurrentBlock) {
    const auto net = std::make_shared<DitNetwork>(DitNetwork::load(root_ / "bd3lm"));
    rudder::DitCheckpointDenoiser cached(net), plain(net, false);
    ASSERT_TRUE(cached.caches_blocks());
    ASSERT_FALSE(plain.caches_blocks());
    const int64_t L = 16, block = 4, mask = 299, V = 300;
    at::manual_seed(11);
    const at::Tensor target = at::randint(0, mask, {3, L}, at::kLong);
    at::Tensor x = at::full({3, L}, mask, at::kLong);
    int64_t calls = 0;
    const auto compare = [&](const at::Tensor& state) {
        SCOPED_TRACE("call " + std::to_string(++calls));
        const at::Tensor got = cached.denoise(state, 0.5, {}).logits, want = plain.denoise(state, 0.5, {}).logits;
        ASSERT_EQ(got.sizes(), want.sizes());
        for (int64_t r = 0; r < state.size(0); ++r) {
            int64_t first = 0;
            while (first < L && state[r][first].item<int64_t>() != mask) ++first;
            const int64_t begin = std::min(first / block * block, L), end = std::min(begin + block, L);
            if (end > begin) {
                EXPECT_LT(max_difference(got[r].narrow(0, begin, end - begin), want[r].narrow(0, begin, end - begin)),
                          1e-5)
                    << "row " << r << ", block at " << begin;
            }
            for (int64_t i = 0; i < L; ++i) {
                if (i >= begin && i < end) continue;
                const int64_t token = state[r][i].item<int64_t>();
                if (token != mask) {
                    EXPECT_EQ(got[r][i][token].item<float>(), 0.0f);
                    EXPECT_TRUE(at::equal(got[r][i], want[r][i])) << "a finished position carries its token";
                } else {
                    EXPECT_NEAR(got[r][i][0].item<float>(), -std::log(V - 1.0), 1e-6) << "no prediction past the block";
                    EXPECT_EQ(got[r][i][mask].item<float>(), rudder::nn::kImpossibleLogProb);
                }
            }
        }
    };
    compare(x);
    // Row 0 unmasks one position a call, row 1 two, row 2 three, left to right.
    for (int64_t call = 0; call < 8; ++call) {
        for (int64_t r = 0; r < 3; ++r)
            for (int64_t k = 0; k <= r; ++k) {
                const at::Tensor masked = x[r].eq(mask).nonzero();
                if (masked.size(0) == 0) continue;
                const int64_t p = masked[0][0].item<int64_t>();
                x[r][p] = target[r][p];
            }
        compare(x);
    }
    at::Tensor changed = x.clone();
    changed[1][2] = (target[1][2].item<int64_t>() + 1) % mask;  // a finished token of row 1's first block
    compare(changed);
    compare(x.narrow(0, 2, 1).contiguous());  // another batch size
    compare(x);
    // The denoiser reuses its output buffers only once the caller has let go: outputs held stay as they were.
    const at::Tensor first = cached.denoise(changed, 0.5, {}).logits, first_copy = first.clone();
    const at::Tensor second = cached.denoise(x, 0.5, {}).logits, second_copy = second.clone();
    const at::Tensor third = cached.denoise(changed, 0.5, {}).logits;
    EXPECT_TRUE(at::equal(first, first_copy));
    EXPECT_TRUE(at::equal(second, second_copy));
    EXPECT_TRUE(at::equal(third, first_copy));
}

TEST_F(DitCheckpoint, CleanLogProbsAreDistributionsThatKeepUnmaskedTokens) {
    const DitNetwork net = DitNetwork::load(root_ / "mdlm");
    const at::Tensor tokens = reference("mdlm.tokens");
    const at::Tensor probs = net.clean_log_probs(tokens, reference("mdlm.sigma"));
    EXPECT_LT(max_difference(probs.exp().sum(-1), at::ones({tokens.size(0), tokens.size(1)})), 1e-5);
    const int64_t mask = net.config().mask_id();
    for (int64_t i = 0; i < tokens.size(1); ++i) {
        const int64_t id = tokens[2][i].item<int64_t>();
        if (id != mask) {
            EXPECT_EQ(probs[2][i][id].item<float>(), 0.0f);
        }
    }
}

TEST_F(DitCheckpoint, HalfPrecisionWeightsLoadWidened) {
    const fs::path dir = copy_of("mdlm", "mdlm_bf16");
    EXPECT_GT(rudder::convert_floating_tensors(dir / "model.safetensors", "bfloat16").bytes, 0u);
    const DitNetwork net = DitNetwork::load(dir);
    const at::Tensor tokens = reference("mdlm.tokens");
    const at::Tensor raw = net.forward(tokens, reference("mdlm.sigma"));
    EXPECT_EQ(raw.scalar_type(), at::kFloat);
    EXPECT_TRUE(raw.isfinite().all().item<bool>());
}

TEST_F(DitCheckpoint, RecognisesBothConfigsAndNotRuddersOwn) {
    EXPECT_TRUE(rudder::nn::is_dit_checkpoint_config(rudder::read_json_file(root_ / "mdlm" / "config.json")));
    EXPECT_TRUE(rudder::nn::is_dit_checkpoint_config(rudder::read_json_file(root_ / "sedd" / "config.json")));
    EXPECT_FALSE(rudder::nn::is_dit_checkpoint_config(json{{"format_version", 1}, {"type", "transformer"}}));
    EXPECT_FALSE(
        rudder::nn::is_dit_checkpoint_config(json{{"model", {{"type", 3}}}, {"graph", json::object()}, {"tokens", 9}}));
    EXPECT_FALSE(rudder::nn::is_dit_checkpoint_config(json::array()));
}

TEST_F(DitCheckpoint, RefusesAMissingTensor) {
    const fs::path dir = copy_of("mdlm", "missing_tensor");
    auto st = rudder::load_safetensors(dir / "model.safetensors");
    std::vector<std::pair<std::string, at::Tensor>> kept;
    for (auto& named : st.tensors)
        if (named.first != "backbone.blocks.1.mlp.2.bias") kept.push_back(named);
    rudder::save_safetensors(dir / "model.safetensors", kept);
    EXPECT_NE(load_error(dir).find("missing tensor 'backbone.blocks.1.mlp.2.bias'"), std::string::npos)
        << load_error(dir);
}

TEST_F(DitCheckpoint, RefusesAWrongShapeAndAnExtraTensor) {
    const fs::path dir = copy_of("sedd", "wrong_shape");
    auto st = rudder::load_safetensors(dir / "model.safetensors");
    for (auto& named : st.tensors)
        if (named.first == "blocks.0.attn_qkv.weight") named.second = at::zeros({3 * 64, 32});
    rudder::save_safetensors(dir / "model.safetensors", st.tensors);
    const std::string shape_error = load_error(dir);
    EXPECT_NE(shape_error.find("tensor 'blocks.0.attn_qkv.weight' has shape [192, 32], the config implies [192, 64]"),
              std::string::npos)
        << shape_error;

    auto extra = rudder::load_safetensors(root_ / "sedd" / "model.safetensors");
    extra.tensors.emplace_back("blocks.2.norm1.weight", at::ones({64}));
    rudder::save_safetensors(dir / "model.safetensors", extra.tensors);
    EXPECT_NE(load_error(dir).find("unexpected tensor 'blocks.2.norm1.weight'"), std::string::npos) << load_error(dir);
}

TEST_F(DitCheckpoint, RefusesUnknownAndUnsupportedConfigFields) {
    const fs::path dir = copy_of("mdlm", "unknown_field");
    json config = rudder::read_json_file(dir / "config.json");
    config["attention_window"] = 128;
    write_json(dir / "config.json", config);
    EXPECT_NE(load_error(dir).find("field 'attention_window': unknown field"), std::string::npos) << load_error(dir);

    config.erase("attention_window");
    config.erase("n_heads");
    write_json(dir / "config.json", config);
    EXPECT_NE(load_error(dir).find("field 'n_heads': missing"), std::string::npos) << load_error(dir);

    const fs::path sedd = copy_of("sedd", "uniform_graph");
    json sedd_config = rudder::read_json_file(sedd / "config.json");
    sedd_config["graph"]["type"] = "uniform";
    write_json(sedd / "config.json", sedd_config);
    EXPECT_NE(load_error(sedd).find("field 'graph.type': only \"absorb\""), std::string::npos) << load_error(sedd);

    sedd_config["graph"]["type"] = "absorb";
    sedd_config["model"]["mlp_ratio"] = 8;
    write_json(sedd / "config.json", sedd_config);
    EXPECT_NE(load_error(sedd).find("field 'model.mlp_ratio': unknown field"), std::string::npos) << load_error(sedd);
}

// A block count the weights cannot hold is refused from the weights files' sizes (one file, or the shards an index
// names), before the shapes of a billion blocks are listed (which took 22 s and 3.3 GB before bad_alloc).
TEST_F(DitCheckpoint, RefusesABlockCountTheWeightsCannotHoldBeforeAllocating) {
    const struct {
        std::string model, field;
        std::vector<std::string> path;
    } cases[] = {{"mdlm", "n_blocks", {"n_blocks"}},
                 {"mdlm_time_sharded", "n_blocks", {"n_blocks"}},
                 {"sedd", "model.n_blocks", {"model", "n_blocks"}}};
    for (const auto& c : cases) {
        SCOPED_TRACE(c.model);
        const fs::path dir = copy_of(c.model, c.model + "_billion_blocks");
        json config = rudder::read_json_file(dir / "config.json");
        json& place = c.path.size() == 1 ? config : config[c.path[0]];
        place[c.path.back()] = 1000000000;
        write_json(dir / "config.json", config);
        const std::string error = load_error(dir);
        EXPECT_NE(error.find("field '" + c.field + "': 1000000000 layers of these sizes make "), std::string::npos)
            << error;
        EXPECT_NE(error.find(c.model == "mdlm_time_sharded" ? "but the 3 shards model.safetensors.index.json names hold"
                                                            : "but model.safetensors holds"),
                  std::string::npos)
            << error;
    }
    // A width beyond int32 is refused as such: the shapes computed from it would overflow.
    const fs::path wide = copy_of("mdlm", "wide");
    json config = rudder::read_json_file(wide / "config.json");
    config["hidden_dim"] = int64_t{1} << 62;
    write_json(wide / "config.json", config);
    EXPECT_NE(load_error(wide).find("field 'hidden_dim': expected a positive integer up to 2147483647"),
              std::string::npos)
        << load_error(wide);

    // Weights that are missing or cannot be measured are reported before the blocks are listed, as a load reports them
    // (without a file to compare with, a billion blocks went unchecked into the listing).
    const struct {
        std::string model, removed, expected;
    } missing[] = {{"mdlm", "model.safetensors", "neither model.safetensors nor model.safetensors.index.json"},
                   {"mdlm_time_sharded", "model-00002-of-00003.safetensors",
                    "shard 'model-00002-of-00003.safetensors' named by the weight_map does not exist"}};
    for (const auto& m : missing) {
        SCOPED_TRACE(m.model + " without " + m.removed);
        const fs::path dir = copy_of(m.model, m.model + "_billion_blocks_no_weights");
        json billion = rudder::read_json_file(dir / "config.json");
        billion["n_blocks"] = 1000000000;
        write_json(dir / "config.json", billion);
        fs::remove(dir / m.removed);
        EXPECT_NE(load_error(dir).find(m.expected), std::string::npos) << load_error(dir);
    }
}

TEST_F(DitCheckpoint, RefusesAnIndexNamingAMissingShard) {
    const fs::path dir = copy_of("mdlm_time_sharded", "missing_shard");
    fs::remove(dir / "model-00002-of-00003.safetensors");
    const std::string error = load_error(dir);
    EXPECT_NE(error.find("shard 'model-00002-of-00003.safetensors' named by the weight_map does not exist"),
              std::string::npos)
        << error;

    // A shard holding a tensor the index gives to another shard.
    const fs::path moved = copy_of("mdlm_time_sharded", "misassigned_shard");
    json index = rudder::read_json_file(moved / "model.safetensors.index.json");
    const std::string name = index["weight_map"].begin().key();
    index["weight_map"][name] = index["weight_map"][name] == "model-00001-of-00003.safetensors"
                                    ? "model-00002-of-00003.safetensors"
                                    : "model-00001-of-00003.safetensors";
    write_json(moved / "model.safetensors.index.json", index);
    // Whichever shard is read first says it: the one holding the tensor, or the one the index gives it to.
    const std::string misassigned = load_error(moved);
    EXPECT_NE(misassigned.find("tensor '" + name + "', which model.safetensors.index.json assigns to"),
              std::string::npos)
        << misassigned;
}

TEST_F(DitCheckpoint, DenoiserGivesTheCleanLogProbsAtTheScheduleNoiseLevel) {
    auto net = std::make_shared<DitNetwork>(DitNetwork::load(root_ / "sedd"));
    rudder::DitCheckpointDenoiser denoiser(net);
    EXPECT_EQ(denoiser.family(), rudder::Family::discrete);
    EXPECT_EQ(denoiser.vocab_size(), 300);
    EXPECT_EQ(denoiser.traits().max_length, 16);
    const at::Tensor tokens = reference("sedd.tokens");
    const double t = 0.6;
    const double sigma = -std::log1p(-(1 - 1e-3) * t);  // SEDD's log-linear total noise
    EXPECT_DOUBLE_EQ(net->sigma_at(t), sigma);
    const auto out = denoiser.denoise(tokens, t, {});
    EXPECT_TRUE(at::equal(out.logits, net->clean_log_probs(tokens, at::full({tokens.size(0)}, sigma, at::kFloat))));
    EXPECT_THROW(denoiser.denoise(tokens, t, {"a condition", "", ""}), std::invalid_argument);
}

TEST_F(DitCheckpoint, ModelLoadingRecognisesTheLayoutAndAsksForTheTokenizer) {
    for (const std::string name : {"mdlm", "sedd"}) {
        try {
            rudder::load_model(root_ / name, std::nullopt);
            ADD_FAILURE() << name << " loaded without a tokenizer";
        } catch (const ModelError& e) {
            EXPECT_NE(std::string(e.what()).find("checkpoint without its tokenizer"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("tokenizer.json (or vocab.json and merges.txt)"), std::string::npos)
                << e.what();
        }
    }
    try {
        rudder::load_model(root_ / "mdlm", rudder::Family::continuous);
        ADD_FAILURE() << "an MDLM checkpoint loaded as a continuous model";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("not a continuous one"), std::string::npos) << e.what();
    }
    // A config Rudder cannot run is reported as such, not as a missing tokenizer.
    const fs::path dir = copy_of("sedd", "sedd_uniform_model");
    json config = rudder::read_json_file(dir / "config.json");
    config["graph"]["type"] = "uniform";
    write_json(dir / "config.json", config);
    try {
        rudder::load_model(dir, std::nullopt);
        ADD_FAILURE() << "a uniform-graph SEDD config was accepted";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("graph.type"), std::string::npos) << e.what();
    }
    // UDLM without its tokenizer: refused before the weights are read, naming BERT's files.
    try {
        rudder::load_model(root_ / "udlm", std::nullopt);
        ADD_FAILURE() << "a UDLM checkpoint without its tokenizer loaded as a model";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("is a UDLM checkpoint without its tokenizer: put bert-base-uncased's"),
                  std::string::npos)
            << e.what();
    }
    // A tokenizer of another size than the network's vocabulary less the mask: refused with both sizes.
    const fs::path other = copy_of("mdlm", "mdlm_other_tokenizer");
    json bytes_only = json::object();
    const json full = rudder::read_json_file(root_ / "gpt2_like_tokenizer" / "vocab.json");
    for (const auto& [token, id] : full.items())
        if (id.get<int64_t>() < 256) bytes_only[token] = id;
    bytes_only["<|endoftext|>"] = 256;
    write_json(other / "vocab.json", bytes_only);
    std::ofstream(other / "merges.txt") << "#version: 0.2\n";
    try {
        rudder::load_model(other, std::nullopt);
        ADD_FAILURE() << "a tokenizer of 257 tokens was accepted for a network of 300";
    } catch (const ModelError& e) {
        EXPECT_NE(
            std::string(e.what()).find("the tokenizer has 257 tokens, and with the mask 258; the network has 300"),
            std::string::npos)
            << e.what();
    }
}

// `rudder models DIR` describes a checkpoint from its config and its weights' headers alone.
TEST_F(DitCheckpoint, DescriptionNamesTheArchitectureSizesAndTokenizer) {
    for (const std::string name : {"mdlm", "sedd", "duo", "bd3lm"}) {
        SCOPED_TRACE(name);
        const json d = rudder::describe_model(root_ / name);
        EXPECT_EQ(d["format"], "public checkpoint (Hugging Face layout)");
        std::string upper = name == "bd3lm" ? "BD3-LM" : name;
        std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
        EXPECT_NE(d["kind"].get<std::string>().find(upper), std::string::npos) << d.dump();
        EXPECT_EQ(d["families"], json({"discrete"}));
        EXPECT_EQ(d["vocab_size"], 300);
        EXPECT_EQ(d["noise"]["graph"], name == "duo" ? "uniform" : "absorbing");
        if (name == "duo")
            EXPECT_TRUE(d["mask_id"].is_null()) << d.dump();
        else
            EXPECT_EQ(d["mask_id"], 299);
        EXPECT_NE(d["tokenizer"].get<std::string>().find("missing"), std::string::npos);
        // Every tensor counted from the header: the network's parameters.
        int64_t parameters = 0;
        for (const auto& [tensor_name, tensor] : rudder::load_safetensors(root_ / name / "model.safetensors").tensors)
            parameters += tensor.numel();
        EXPECT_EQ(d["weights"]["parameters"], parameters);
        EXPECT_EQ(d["weights"]["bytes"], fs::file_size(root_ / name / "model.safetensors"));
    }
}

// With GPT-2's tokenizer files beside it (here GPT-2's format with the tiny vocabulary) a checkpoint is a discrete
// model: the mask is the id after the tokenizer's, a text ends at "<|endoftext|>", and a recipe samples it with
// controls: a prefix alone (each text ends where the model writes its end), and length, prefix and suffix
// (infilling), a banned word and prompt guidance, all satisfied in every sample.
TEST_F(DitCheckpoint, WithItsTokenizerACheckpointIsAModelThatARecipeSamples) {
    rudder::plugins::Registry registry({fs::path(RUDDER_TEST_PLUGIN_DIR)});
    for (const std::string name : {"mdlm", "sedd"}) {
        SCOPED_TRACE(name);
        const fs::path dir = copy_with_tokenizer(name, name + "_with_tokenizer");
        const rudder::Model model = rudder::load_model(dir, std::nullopt);
        EXPECT_EQ(model.family, rudder::Family::discrete);
        EXPECT_EQ(model.tokenizer->type(), "bpe");
        EXPECT_EQ(model.tokenizer->vocab_size(), 300);
        EXPECT_EQ(model.tokenizer->mask_id(), 299);
        const int64_t end = model.tokenizer->pad_id();
        ASSERT_GE(end, 0);
        EXPECT_EQ(model.tokenizer->token(end), "<|endoftext|>");
        EXPECT_NE(model.training_layout.find("packed documents"), std::string::npos);
        EXPECT_EQ(model.tokenizer->token(299), "<mask>");
        const std::vector<int64_t> ids = model.tokenizer->encode("the cat sat near the river");
        EXPECT_EQ(model.tokenizer->decode(ids.data(), static_cast<int64_t>(ids.size())), "the cat sat near the river");
        std::vector<int64_t> with_mask = ids;
        with_mask.insert(with_mask.begin() + 1, 299);
        EXPECT_EQ(model.tokenizer->decode(with_mask.data(), static_cast<int64_t>(with_mask.size())),
                  "the<mask> cat sat near the river");

        const std::string recipe = R"({"model": ")" + dir.string() + R"(", "sampler": {"name": "analytic", "steps": 8},
            "samples": 3, "seed": 4, "controllers": [{"plugin": "span", "params": {"prefix": "the cat"}}]})";
        rudder::Generator generator(rudder::parse_recipe(recipe, "."), registry);
        const auto samples = generator.generate();
        ASSERT_EQ(samples.size(), 3u);
        const std::vector<int64_t> prefix = model.tokenizer->encode("the cat");
        for (const auto& s : samples) {
            ASSERT_EQ(s.tokens.size(), 16u);
            const int64_t first_end = std::find(s.tokens.begin(), s.tokens.end(), end) - s.tokens.begin();
            EXPECT_EQ(s.n_tokens, first_end) << "the text ends where the model writes <|endoftext|>";
            EXPECT_TRUE(std::none_of(s.tokens.begin(), s.tokens.end(), [](int64_t id) { return id == 299; })) << s.text;
            EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), s.tokens.begin())) << s.text;
            EXPECT_EQ(s.text.rfind("the cat", 0), 0u) << s.text;
            EXPECT_EQ(s.text, model.tokenizer->decode(s.tokens.data(), first_end));
        }

        const std::vector<int64_t> suffix = model.tokenizer->encode(" the river");
        const std::vector<int64_t> banned = model.tokenizer->encode(" sat");
        ASSERT_EQ(banned.size(), 1u) << "the fixture's merges spell \" sat\" as one token";
        const std::string controlled = R"({"model": ")" + dir.string() + R"(",
            "sampler": {"name": "analytic", "steps": 8, "prompt_guidance": 1.5}, "samples": 6, "seed": 7,
            "controllers": [{"plugin": "length", "params": {"tokens": 9}},
                            {"plugin": "span", "params": {"prefix": "the cat", "suffix": " the river", "length": 9}},
                            {"plugin": "exclude_words", "params": {"words": ["sat"]}}]})";
        rudder::Generator constrained(rudder::parse_recipe(controlled, "."), registry);
        for (const auto& s : constrained.generate()) {
            expect_prefix_length_and_never(s, prefix, 9, end, {banned[0]});
            if (s.tokens.size() != 16u) continue;
            EXPECT_TRUE(
                std::equal(suffix.begin(), suffix.end(), s.tokens.begin() + 9 - static_cast<int64_t>(suffix.size())))
                << s.text;
            for (const auto& control : s.controls)
                EXPECT_EQ(control.verdict.satisfied, 1) << control.label << ": " << s.text;
        }
    }
}

// The mdlm and sedd samplers write the tokens MDLM's _sample() with ddpm_cache and SEDD's pc_sampler write, from the
// same seed (dit_samplers_reference.py, over the fixture's float64 network, with its random numbers drawn as the
// authors draw them): MDLM with and without time conditioning (which turns MDLM's cache off), SEDD with each predictor;
// over two batches (the generator read on from one to the next), with few steps (most positions left to the noise
// removal) and without the noise removal (masks left in the sequence).
TEST_F(DitCheckpoint, MdlmAndSeddSamplersWriteTheTokensOfTheAuthorsSamplers) {
    struct Case {
        std::string name;
        int64_t seed, samples, batch_size;
        json sampler;
    };
    const std::vector<Case> cases = {
        {"mdlm", 3, 3, 3, {{"name", "mdlm"}, {"steps", 8}}},
        {"mdlm", 5, 4, 2, {{"name", "mdlm"}, {"steps", 16}}},
        {"mdlm_time_sharded", 7, 2, 2, {{"name", "mdlm"}, {"steps", 8}}},
        {"mdlm", 9, 2, 2, {{"name", "mdlm"}, {"steps", 3}}},
        {"mdlm", 11, 2, 2, {{"name", "mdlm"}, {"steps", 2}, {"eps", 0.3}, {"noise_removal", false}}},
        {"mdlm", 13, 2, 2, {{"name", "mdlm"}}},  // MDLM's defaults: 128 steps, eps 1e-5
        {"sedd", 3, 2, 2, {{"name", "sedd"}, {"steps", 8}}},
        {"sedd", 4, 2, 2, {{"name", "sedd"}, {"steps", 8}, {"predictor", "analytic"}}},
        {"sedd", 5, 4, 2, {{"name", "sedd"}, {"steps", 16}}},
        {"sedd", 6, 2, 2, {{"name", "sedd"}, {"steps", 3}, {"predictor", "analytic"}}},
        {"sedd", 11, 2, 2, {{"name", "sedd"}, {"steps", 2}, {"eps", 0.3}, {"noise_removal", false}}},
        {"sedd", 13, 2, 2, {{"name", "sedd"}}},  // SEDD's config: 128 steps, euler, eps 1e-5
    };
    rudder::plugins::Registry registry({fs::path(RUDDER_TEST_PLUGIN_DIR)});
    json inputs = json::array();
    std::vector<std::vector<std::vector<int64_t>>> ours;
    for (const Case& c : cases) {
        const fs::path dir = root_ / (c.name + "_authors_sampler");
        if (!fs::exists(dir)) {
            copy_with_tokenizer(c.name, dir.filename().string());
        }
        const json recipe = {{"model", dir.string()},
                             {"seed", c.seed},
                             {"samples", c.samples},
                             {"batch_size", c.batch_size},
                             {"sampler", c.sampler}};
        rudder::Generator generator(rudder::parse_recipe(recipe.dump(), "."), registry);
        std::vector<std::vector<int64_t>> rows;
        for (const auto& s : generator.generate()) rows.push_back(s.tokens);
        // (SEDD's random score unmasks everything at once: c S passes 1, and the mask's entry 1 - c S is below 0.)
        if (c.name == "mdlm" && !c.sampler.value("noise_removal", true)) {
            EXPECT_TRUE(std::any_of(rows.begin(), rows.end(), [](const auto& r) {
                return std::count(r.begin(), r.end(), 299) > 0;
            })) << "without the noise removal, a run that stops at t = 0.3 leaves masks";
        }
        ours.push_back(rows);
        inputs.push_back({{"dir", dir.string()},
                          {"sampler", c.sampler.at("name")},
                          {"seed", c.seed},
                          {"samples", c.samples},
                          {"batch_size", c.batch_size},
                          {"steps", c.sampler.value("steps", 128)},
                          {"eps", c.sampler.value("eps", 1e-5)},
                          {"noise_removal", c.sampler.value("noise_removal", true)},
                          {"predictor", c.sampler.value("predictor", "euler")}});
    }
    const json theirs = samplers_reference("dit_sampler", inputs);
    ASSERT_EQ(theirs.size(), cases.size());
    for (size_t k = 0; k < cases.size(); ++k)
        EXPECT_EQ(ours[k], (theirs[k].get<std::vector<std::vector<int64_t>>>()))
            << cases[k].name << " " << cases[k].sampler.dump() << " seed " << cases[k].seed;
}

// BD3-LM's _semi_ar_sampler with first hitting (kuleshov-group/bd3lms diffusion.py), as its scripts run it (one
// sequence a batch): Rudder's bd3lm sampler writes the tokens of tests/nets/dit_samplers_reference.py from the same
// seed, with and without the nucleus, after a one-token prefix (BD3-LM's BOS), past 256 positions (where its entropy
// check runs), and at temperatures of Rudder's own (0: the arg-max). A sequence whose blocks past 256 positions keep
// too little entropy starts again, and gives up at its 10th start on both sides.
TEST_F(DitCheckpoint, Bd3lmSamplerWritesTheTokensOfBd3lmsSemiAutoregressiveSampler) {
    rudder::plugins::Registry registry({fs::path(RUDDER_TEST_PLUGIN_DIR)});
    const auto with_tokenizer = [&](const std::string& name, int64_t length) {
        const fs::path dir = root_ / name;
        if (fs::exists(dir)) return dir;
        copy_with_tokenizer("bd3lm", name);
        json config = rudder::read_json_file(dir / "config.json");
        config["model_length"] = length;  // rotary positions: the same weights at any length
        write_json(dir / "config.json", config);
        return dir;
    };
    const fs::path tiny = with_tokenizer("bd3lm_authors_sampler", 16), long_one = with_tokenizer("bd3lm_264", 264);
    const rudder::Model model = rudder::load_model(tiny, std::nullopt);
    std::string repeated = "cat";  // a prefix of 240 or more tokens of little entropy
    while (model.tokenizer->encode(repeated).size() < 240) repeated += " cat";
    struct Case {
        fs::path dir;
        int64_t seed, samples, length;
        double top_p, temperature;
        std::string prefix;
        bool gives_up;
    };
    const std::vector<Case> cases = {
        {tiny, 3, 2, 16, 1.0, 1.0, "", false},       {tiny, 5, 2, 16, 0.9, 1.0, "", false},
        {tiny, 7, 3, 16, 0.9, 1.0, "cat", false},    {tiny, 8, 2, 8, 0.5, 1.0, "", false},
        {tiny, 9, 2, 16, 0.9, 0.7, "", false},       {tiny, 10, 2, 16, 1.0, 0.0, "", false},
        {long_one, 11, 1, 264, 0.9, 1.0, "", false}, {long_one, 12, 1, 264, 1.0, 1.0, repeated, true},
    };
    json inputs = json::array();
    std::vector<json> ours;
    for (const Case& c : cases) {
        json recipe = {{"model", c.dir.string()},
                       {"seed", c.seed},
                       {"samples", c.samples},
                       {"batch_size", 1},
                       {"max_length", c.length},
                       {"sampler", {{"name", "bd3lm"}, {"top_p", c.top_p}, {"temperature", c.temperature}}}};
        if (!c.prefix.empty()) recipe["controllers"] = {{{"plugin", "span"}, {"params", {{"prefix", c.prefix}}}}};
        json rows = json::array();
        try {
            rudder::Generator generator(rudder::parse_recipe(recipe.dump(), "."), registry);
            for (const auto& s : generator.generate()) rows.push_back(s.tokens);
        } catch (const rudder::GenerationFault& e) {
            rows = {{"error", e.what()}};
            EXPECT_NE(std::string(e.what()).find("gave up"), std::string::npos) << e.what();
        }
        EXPECT_EQ(rows.is_object(), c.gives_up) << "seed " << c.seed << ": " << rows.dump().substr(0, 300);
        ours.push_back(rows);
        inputs.push_back({{"dir", c.dir.string()},
                          {"sampler", "bd3lm"},
                          {"seed", c.seed},
                          {"samples", c.samples},
                          {"length", c.length},
                          {"top_p", c.top_p},
                          {"temperature", c.temperature},
                          {"prefix", model.tokenizer->encode(c.prefix)}});
    }
    const json theirs = samplers_reference("bd3lm_sampler", inputs);
    ASSERT_EQ(theirs.size(), cases.size());
    // Hard constraints hold: a prefix, a length (its end fills later blocks before they are reached) and a banned word,
    // with sequences decoded together.
    const std::vector<int64_t> banned = model.tokenizer->encode(" the");
    ASSERT_EQ(banned.size(), 1u) << "the fixture's merges spell \" the\" as one token";
    const json constrained = {{"model", tiny.string()},
                              {"seed", 4},
                              {"samples", 6},
                              {"batch_size", 3},
                              {"sampler", {{"name", "bd3lm"}, {"top_p", 0.9}}},
                              {"controllers",
                               {{{"plugin", "span"}, {"params", {{"prefix", "cat sat"}}}},
                                {{"plugin", "length"}, {"params", {{"tokens", 10}}}},
                                {{"plugin", "exclude_words"}, {"params", {{"words", {"the"}}}}}}}};
    rudder::Generator generator(rudder::parse_recipe(constrained.dump(), "."), registry);
    for (const auto& s : generator.generate())
        expect_prefix_length_and_never(s, model.tokenizer->encode("cat sat"), 10, model.tokenizer->pad_id(),
                                       {banned[0], 299});

    for (size_t k = 0; k < cases.size(); ++k) {
        if (cases[k].gives_up)
            EXPECT_TRUE(theirs[k].is_object() && theirs[k].contains("error")) << "seed " << cases[k].seed;
        else
            EXPECT_EQ(ours[k], theirs[k])
                << "seed " << cases[k].seed << ", top_p " << cases[k].top_p << ", temperature " << cases[k].temperature;
    }
}

// A recipe the mdlm, sedd or bd3lm sampler cannot run is refused at its pointer: temperature 0 (the mdlm draw decides
// whether a position unmasks), a key of theirs given to another sampler, the sedd sampler on a model without SEDD's
// score, bd3lm on a model without blocks, with steps, or on a time-conditioned BD3-LM.
TEST_F(DitCheckpoint, TheAuthorsSamplersRefuseWhatTheyCannotRun) {
    rudder::plugins::Registry registry({fs::path(RUDDER_TEST_PLUGIN_DIR)});
    const fs::path dir = copy_with_tokenizer("mdlm", "mdlm_refusals");
    // The recipe's issues when a generator is made for it on `model` (none: it was accepted).
    const auto issues_of = [&](const json& sampler, const fs::path& model) {
        try {
            rudder::Generator generator(
                rudder::parse_recipe(json{{"model", model.string()}, {"sampler", sampler}}.dump(), "."), registry);
        } catch (const rudder::RecipeError& e) {
            return e.issues();
        }
        return std::vector<rudder::RecipeIssue>{};
    };
    // One issue, at `pointer`, saying `words`.
    const auto expect_one = [](const std::vector<rudder::RecipeIssue>& issues, const std::string& pointer,
                               const std::string& words, const std::string& what) {
        ASSERT_EQ(issues.size(), 1u) << what << ": one issue, not " << issues.size();
        EXPECT_EQ(issues[0].pointer, pointer) << what;
        EXPECT_NE(issues[0].message.find(words), std::string::npos) << issues[0].message;
    };
    expect_one(issues_of({{"name", "mdlm"}, {"temperature", 0}}, dir), "/sampler/temperature", "no arg-max to take",
               "temperature 0");
    expect_one(issues_of({{"name", "sedd"}}, dir), "/sampler/name", "reads SEDD's score", "sedd on an MDLM checkpoint");
    expect_one(issues_of({{"name", "analytic"}, {"noise_removal", false}}, dir), "/sampler/noise_removal",
               "the mdlm and sedd samplers", "noise_removal for analytic");
    expect_one(issues_of({{"name", "bd3lm"}}, dir), "/sampler/name", "has no blocks", "bd3lm on an MDLM checkpoint");
    expect_one(issues_of({{"name", "bd3lm"}, {"steps", 5000}}, dir), "/sampler/steps",
               "first_hitting and bd3lm samplers", "bd3lm with steps (the key's issue, before the model's)");

    const fs::path timed = copy_with_tokenizer("bd3lm", "bd3lm_time_conditioned");
    json config = rudder::read_json_file(timed / "config.json");
    config["time_conditioning"] = true;
    write_json(timed / "config.json", config);
    expect_one(issues_of({{"name", "bd3lm"}}, timed), "/sampler/name", "is time-conditioned",
               "bd3lm on a time-conditioned BD3-LM");
}

// DUO with GPT-2's tokenizer is a uniform-noise model: its last id is "[PAD]", every position is redrawn at every
// step, and a recipe samples it with a prefix and a banned word, both kept in every sample.
TEST_F(DitCheckpoint, WithItsTokenizerADuoCheckpointIsAUniformNoiseModelThatARecipeSamples) {
    rudder::plugins::Registry registry({fs::path(RUDDER_TEST_PLUGIN_DIR)});
    const fs::path dir = copy_with_tokenizer("duo", "duo_with_tokenizer");
    const rudder::Model model = rudder::load_model(dir, std::nullopt);
    ASSERT_TRUE(model.denoiser->traits().uniform_noise.has_value());
    EXPECT_EQ(model.tokenizer->vocab_size(), 300);
    EXPECT_EQ(model.tokenizer->token(299), "[PAD]");
    const int64_t end = model.tokenizer->pad_id();
    ASSERT_GE(end, 0);
    EXPECT_EQ(model.tokenizer->token(end), "<|endoftext|>");
    const std::vector<int64_t> banned = model.tokenizer->encode(" the");
    ASSERT_EQ(banned.size(), 1u) << "the fixture's merges spell \" the\" as one token";
    for (const char* sampler : {"analytic", "euler"}) {
        SCOPED_TRACE(sampler);
        const auto samples = constrained_samples(dir, sampler, "cat sat", 10, "the", registry);
        ASSERT_EQ(samples.size(), 4u);
        const std::vector<int64_t> prefix = model.tokenizer->encode("cat sat");
        for (const auto& s : samples) expect_prefix_length_and_never(s, prefix, 10, end, {banned[0], 299});
    }
}

// UDLM with a WordPiece vocabulary of the tiny network's 300 tokens (BERT's specials first, as bert-base-uncased's
// vocab.txt has them): a uniform-noise model whose texts are padded with [PAD] and whose [MASK] is never drawn; a
// recipe with a prefix, a length and a banned word satisfies all three in every sample, with both samplers.
TEST_F(DitCheckpoint, WithBertsWordPieceTokenizerAUdlmCheckpointIsAUniformNoiseModelThatARecipeSamples) {
    rudder::plugins::Registry registry({fs::path(RUDDER_TEST_PLUGIN_DIR)});
    const fs::path dir = copy_of("udlm", "udlm_with_tokenizer");
    std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".",   ",",    "the",
                                      "cat",   "sat",   "near",  "river", "on",     "mat", "##ed", "##ing"};
    for (char c = 'a'; c <= 'z'; ++c) vocab.push_back(std::string(1, c));
    for (char c = 'a'; c <= 'z'; ++c) vocab.push_back("##" + std::string(1, c));
    for (int i = 0; vocab.size() < 300; ++i) vocab.push_back("w" + std::to_string(i));
    {
        std::ofstream out(dir / "vocab.txt");
        for (const auto& token : vocab) out << token << "\n";
    }
    const rudder::Model model = rudder::load_model(dir, std::nullopt);
    ASSERT_TRUE(model.denoiser->traits().uniform_noise.has_value());
    EXPECT_EQ(model.tokenizer->type(), "wordpiece");
    EXPECT_EQ(model.tokenizer->vocab_size(), 300);
    EXPECT_EQ(model.tokenizer->pad_id(), 0);
    EXPECT_EQ(model.tokenizer->mask_id(), 4);
    // The same vocabulary as a Hugging Face tokenizer.json (bert-base-uncased's layout) loads as WordPiece too, and a
    // byte-level BPE file in a UDLM folder is refused, naming what it is.
    {
        const fs::path as_json = copy_of("udlm", "udlm_with_tokenizer_json");
        json vocab_ids = json::object();
        for (size_t i = 0; i < vocab.size(); ++i) vocab_ids[vocab[i]] = i;
        json added = json::array();
        for (int64_t i = 0; i < 5; ++i)
            added.push_back({{"id", i},
                             {"content", vocab[static_cast<size_t>(i)]},
                             {"single_word", false},
                             {"lstrip", false},
                             {"rstrip", false},
                             {"normalized", false},
                             {"special", true}});
        write_json(as_json / "tokenizer.json",
                   {{"version", "1.0"},
                    {"truncation", nullptr},
                    {"padding", nullptr},
                    {"added_tokens", added},
                    {"normalizer",
                     {{"type", "BertNormalizer"},
                      {"clean_text", true},
                      {"handle_chinese_chars", true},
                      {"strip_accents", nullptr},
                      {"lowercase", true}}},
                    {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
                    {"post_processor", nullptr},
                    {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
                    {"model",
                     {{"type", "WordPiece"},
                      {"unk_token", "[UNK]"},
                      {"continuing_subword_prefix", "##"},
                      {"max_input_chars_per_word", 100},
                      {"vocab", vocab_ids}}}});
        const rudder::Model from_json = rudder::load_model(as_json, std::nullopt);
        EXPECT_EQ(from_json.tokenizer->type(), "wordpiece");
        EXPECT_EQ(from_json.tokenizer->encode("The cat"), (std::vector<int64_t>{7, 8}));
        EXPECT_EQ(rudder::describe_model(as_json)["tokenizer"], "WordPiece, tokenizer.json");
        const fs::path with_bpe = copy_with_tokenizer("udlm", "udlm_with_gpt2_tokenizer");
        try {
            rudder::load_model(with_bpe, std::nullopt);
            ADD_FAILURE() << "a UDLM checkpoint took GPT-2's tokenizer";
        } catch (const ModelError& e) {
            EXPECT_NE(std::string(e.what()).find("the folder's byte-level BPE, vocab.json + merges.txt is not one"),
                      std::string::npos)
                << e.what();
        }
    }
    const int64_t plural = std::find(vocab.begin(), vocab.end(), "##s") - vocab.begin();
    EXPECT_EQ(model.tokenizer->encode("The cats sat."), (std::vector<int64_t>{7, 8, plural, 9, 5}));
    EXPECT_FALSE(model.training_layout.empty());
    EXPECT_EQ(rudder::describe_model(dir)["tokenizer"], "WordPiece, vocab.txt (BERT's uncased settings)");
    const std::vector<int64_t> prefix = model.tokenizer->encode("the cat");
    for (const char* sampler : {"analytic", "euler"}) {
        SCOPED_TRACE(sampler);
        const auto samples = constrained_samples(dir, sampler, "the cat", 7, "river", registry);
        ASSERT_EQ(samples.size(), 4u);
        for (const auto& s : samples) {
            expect_prefix_length_and_never(s, prefix, 7, 0, {11, 4});  // [PAD] from 7 on; never "river" nor [MASK]
            EXPECT_EQ(s.text.rfind("the cat", 0), 0u) << s.text;
            for (const auto& control : s.controls)
                EXPECT_EQ(control.verdict.satisfied, 1) << control.label << ": " << s.text;
        }
    }
}

// BD3-LM with GPT-2's tokenizer: its authors' sampler (first hitting, block by block, nucleus 0.9) is the model's
// recommended one, a recipe that names none samples with it and keeps a prefix, and samplers that would unmask the
// whole sequence at once, or blocks that straddle the model's, are refused.
TEST_F(DitCheckpoint, ABd3lmCheckpointIsSampledBlockByBlock) {
    rudder::plugins::Registry registry({fs::path(RUDDER_TEST_PLUGIN_DIR)});
    const fs::path dir = copy_with_tokenizer("bd3lm", "bd3lm_with_tokenizer");
    const rudder::Model model = rudder::load_model(dir, std::nullopt);
    EXPECT_EQ(model.denoiser->traits().decoding_block, 4);
    EXPECT_EQ(model.recommended_sampler, json({{"name", "first_hitting"}, {"block_length", 4}, {"top_p", 0.9}}));
    const std::string recipe = R"({"model": ")" + dir.string() + R"(", "samples": 4, "seed": 6,
        "controllers": [{"plugin": "span", "params": {"prefix": "the cat"}}]})";
    rudder::Generator generator(rudder::parse_recipe(recipe, "."), registry);
    EXPECT_EQ(generator.recipe().sampler.name, "first_hitting");
    EXPECT_EQ(generator.recipe().sampler.settings.at("block_length"), 4);
    const auto samples = generator.generate();
    ASSERT_EQ(samples.size(), 4u);
    const std::vector<int64_t> prefix = model.tokenizer->encode("the cat");
    for (const auto& s : samples) {
        ASSERT_EQ(s.tokens.size(), 16u);
        EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), s.tokens.begin())) << s.text;
        EXPECT_TRUE(std::none_of(s.tokens.begin(), s.tokens.end(), [](int64_t id) { return id == 299; })) << s.text;
    }
    const auto issue_of = [&](const std::string& sampler) {
        try {
            rudder::Generator refused(
                rudder::parse_recipe(R"({"model": ")" + dir.string() + R"(", "sampler": )" + sampler + "}", "."),
                registry);
        } catch (const rudder::RecipeError& e) {
            return e.issues().at(0).pointer + ": " + e.issues().at(0).message;
        }
        return std::string("(accepted)");
    };
    EXPECT_NE(issue_of(R"({"name": "analytic"})")
                  .find("/sampler/name: model 'bd3lm_with_tokenizer' predicts each block of 4"),
              std::string::npos)
        << issue_of(R"({"name": "analytic"})");
    EXPECT_NE(issue_of(R"({"name": "first_hitting", "block_length": 3})").find("/sampler/block_length: "),
              std::string::npos);
    EXPECT_NE(issue_of(R"({"name": "first_hitting"})").find("(none given)"), std::string::npos);
    EXPECT_EQ(issue_of(R"({"name": "first_hitting", "block_length": 2})"), "(accepted)");
    EXPECT_NE(issue_of(R"({"name": "first_hitting", "block_length": 4, "prompt_guidance": 1.0})")
                  .find("/sampler/prompt_guidance: "),
              std::string::npos);
    EXPECT_EQ(issue_of(R"({"name": "confidence", "steps": 16, "block_length": 4})"), "(accepted)");
}

}  // namespace
