// The transformer denoisers: shapes, SUBS, conditioning, config validation, gradients, and weights files.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "nets_fixture.hpp"
#include <rudder/nn/config_error.hpp>
#include <rudder/nn/denoiser_net.hpp>
#include <rudder/nn/safetensors.hpp>
#include <rudder/nn/text_classifier.hpp>
#include <rudder/nn/weights.hpp>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adam.h>
#include <rudder/runtime/generator.hpp>

#include "transformer_denoiser.hpp"
#include "seeded_generator.hpp"

namespace rudder {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace rudder::testing;

std::shared_ptr<nn::ContinuousDenoiserNet> continuous_net(bool conditional, uint64_t seed = 1) {
    at::manual_seed(seed);
    return std::make_shared<nn::ContinuousDenoiserNet>(micro_config("continuous", conditional), *tokenizer());
}

std::shared_ptr<nn::DiscreteDenoiserNet> discrete_net(bool conditional, uint64_t seed = 1) {
    at::manual_seed(seed);
    return std::make_shared<nn::DiscreteDenoiserNet>(micro_config("discrete", conditional), *tokenizer());
}

// The message of the ConfigError `make` throws, or "" if it throws none.
template <class F>
std::string config_error(F make) {
    try {
        make();
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

// A model directory of its own per test, removed afterwards.
class TempDir {
public:
    TempDir() {
        path_ = fs::temp_directory_path() /
                ("rudder_nets_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    ~TempDir() { fs::remove_all(path_); }
    const fs::path& path() const { return path_; }

private:
    static int& counter() {
        static int n = 0;
        return n;
    }
    fs::path path_;
};

std::vector<std::pair<std::string, at::Tensor>> parameters_of(const torch::nn::Module& net) {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& item : net.named_parameters()) out.emplace_back(item.key(), item.value().detach().clone());
    return out;
}

json model_config(const nn::DenoiserNet& net) {
    json c = {{"network", net.config()}, {"weights", "weights.safetensors"}};
    if (net.family() == Family::continuous) {
        c["schedule"] = net.config()["schedule"];
    } else {
        c["mask_schedule"] = net.config()["mask_schedule"];
    }
    return c;
}

// ---------------------------------------------------------------------------------------------------------------

TEST(ContinuousNet, OutputsHaveTheirShapesAndAreNormalisedWithAndWithoutCondition) {
    const int64_t B = 3, L = 7, V = tokenizer()->vocab_size();
    for (bool conditional : {false, true}) {
        TransformerDenoiser den(continuous_net(conditional), tokenizer());
        EXPECT_EQ(den.family(), Family::continuous);
        EXPECT_EQ(den.vocab_size(), V);
        EXPECT_EQ(den.embed_dim(), 16);
        EXPECT_EQ(den.traits().conditional, conditional);
        ASSERT_TRUE(den.embedding().defined());
        EXPECT_EQ(den.embedding().sizes(), (at::IntArrayRef{V, 16}));
        std::vector<std::string> conditions;
        if (conditional) conditions = {meaning_representations()[0], "", meaning_representations()[5]};
        auto gen = make_gen(2);
        const at::Tensor x = at::randn({B, L, 16}, gen, at::kFloat);
        const DenoiserOutput out = den.denoise(x, 0.5, conditions);
        ASSERT_EQ(out.logits.sizes(), (at::IntArrayRef{B, L, V}));
        ASSERT_EQ(out.x0.sizes(), (at::IntArrayRef{B, L, 16}));
        EXPECT_EQ(out.logits.scalar_type(), at::kFloat);
        EXPECT_TRUE(out.logits.isfinite().all().item<bool>());
        EXPECT_TRUE(out.x0.isfinite().all().item<bool>());
        EXPECT_LT((out.logits.exp().sum(-1) - 1).abs().max().item<double>(), 1e-4);
        EXPECT_FALSE(out.logits.requires_grad());
    }
}

TEST(DiscreteNet, SubsMakesTheMaskImpossibleAndCommittedTokensCertain) {
    const int64_t V = tokenizer()->vocab_size(), mask = tokenizer()->mask_id();
    for (bool conditional : {false, true}) {
        TransformerDenoiser den(discrete_net(conditional), tokenizer());
        EXPECT_EQ(den.family(), Family::discrete);
        EXPECT_EQ(den.embed_dim(), 0);
        EXPECT_FALSE(den.embedding().defined());
        EXPECT_EQ(den.traits().conditional, conditional);
        at::Tensor tokens = sentence_tokens().slice(0, 0, 4).clone();
        auto gen = make_gen(3);
        const at::Tensor masked = at::rand(tokens.sizes(), gen).lt(0.5);
        tokens.masked_fill_(masked, mask);
        std::vector<std::string> conditions;
        if (conditional) conditions = {meaning_representations()[0], "", meaning_representations()[2], ""};
        const at::Tensor logp = den.denoise(tokens, 0.7, conditions).logits;
        ASSERT_EQ(logp.sizes(), (at::IntArrayRef{4, kLength, V}));
        EXPECT_TRUE(logp.isfinite().all().item<bool>());
        EXPECT_LT((logp.exp().sum(-1) - 1).abs().max().item<double>(), 1e-4);
        // The mask token is impossible everywhere.
        EXPECT_EQ(logp.select(2, mask).max().item<float>(), nn::kImpossibleLogProb);
        // Unmasked positions keep their token with certainty; masked ones spread over real tokens.
        const at::Tensor own = logp.gather(2, tokens.unsqueeze(2)).squeeze(2);
        EXPECT_TRUE(own.masked_select(masked.logical_not()).eq(0).all().item<bool>());
        EXPECT_LT(logp.amax(2).masked_select(masked).max().item<float>(), 0.0f);
    }
}

TEST(Conditioning, AllPadConditionIsTheUnconditionalModelAndAConditionChangesTheOutput) {
    auto gen = make_gen(4);
    const at::Tensor x = at::randn({2, kLength, 16}, gen, at::kFloat);
    const at::Tensor t = at::full({2}, 0.4, at::kFloat);
    auto cont = continuous_net(true);
    cont->eval();
    at::NoGradGuard no_grad;
    const at::Tensor none = cont->predict_x0(x, t, {});
    const at::Tensor pads = at::full({2, kConditionLength}, tokenizer()->pad_id(), at::kLong);
    EXPECT_TRUE(cont->predict_x0(x, t, pads).allclose(none, 1e-6, 1e-6));

    // Trailing pad columns change nothing, and a row's output depends only on its own condition.
    const at::Tensor cond = condition_tokens().slice(0, 0, 2);
    const at::Tensor full = cont->predict_x0(x, t, cond);
    EXPECT_TRUE(cont->predict_x0(x, t, cond.slice(1, 0, 12)).allclose(full, 1e-5, 1e-5));
    EXPECT_FALSE(full.allclose(none, 1e-3, 1e-3));
    at::Tensor mixed = cond.clone();
    mixed[1].fill_(tokenizer()->pad_id());
    const at::Tensor half = cont->predict_x0(x, t, mixed);
    EXPECT_TRUE(half[0].allclose(full[0], 1e-5, 1e-5));
    EXPECT_TRUE(half[1].allclose(none[1], 1e-5, 1e-5));

    auto disc = discrete_net(true);
    disc->eval();
    const at::Tensor tokens = at::full({2, kLength}, tokenizer()->mask_id(), at::kLong);
    const at::Tensor d_none = disc->log_probs(tokens, {});
    EXPECT_TRUE(disc->log_probs(tokens, pads).allclose(d_none, 1e-5, 1e-5));
    EXPECT_FALSE(disc->log_probs(tokens, cond).allclose(d_none, 1e-3, 1e-3));

    // Through the Denoiser interface, "" and no conditions at all are the same unconditional call.
    TransformerDenoiser den(disc, tokenizer());
    EXPECT_TRUE(den.denoise(tokens, 1.0, {"", ""}).logits.equal(den.denoise(tokens, 1.0, {}).logits));
}

TEST(Conditioning, BadConditionsAreRefusedWithTheReason) {
    TransformerDenoiser uncond(discrete_net(false), tokenizer());
    const at::Tensor tokens = at::full({2, 5}, tokenizer()->mask_id(), at::kLong);
    try {
        uncond.denoise(tokens, 1.0, {"name[Aromi]", ""});
        ADD_FAILURE() << "no throw";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("without"), std::string::npos) << e.what();
    }
    TransformerDenoiser cond(discrete_net(true), tokenizer());
    EXPECT_THROW(cond.denoise(tokens, 1.0, {"name[Aromi]"}), std::invalid_argument);  // one per row
    std::string too_long;
    for (int i = 0; i < 20; ++i) too_long += "pub ";
    try {
        cond.denoise(tokens, 1.0, {"name[Aromi]", too_long});
        ADD_FAILURE() << "no throw";
    } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("condition 1"), std::string::npos) << what;
        EXPECT_NE(what.find("20 tokens"), std::string::npos) << what;
    }
}

TEST(Inputs, WrongShapesAndLengthsAreRefused) {
    TransformerDenoiser cont(continuous_net(false), tokenizer());
    EXPECT_THROW(cont.denoise(at::zeros({2, kLength + 1, 16}), 0.5, {}), std::invalid_argument);
    EXPECT_THROW(cont.denoise(at::zeros({2, 4, 8}), 0.5, {}), std::invalid_argument);
    EXPECT_THROW(cont.denoise(at::zeros({2, 4}, at::kLong), 0.5, {}), std::invalid_argument);
    EXPECT_THROW(cont.denoise(at::zeros({2, 4, 16}), 1.5, {}), std::invalid_argument);
    TransformerDenoiser disc(discrete_net(false), tokenizer());
    try {
        disc.denoise(at::zeros({1, kLength + 3}, at::kLong), 0.5, {});
        ADD_FAILURE() << "no throw";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("max_length = 12"), std::string::npos) << e.what();
    }
    EXPECT_THROW(disc.denoise(at::full({1, 4}, tokenizer()->vocab_size(), at::kLong), 0.5, {}), std::invalid_argument);
    EXPECT_THROW(disc.denoise(at::zeros({1, 4, 16}), 0.5, {}), std::invalid_argument);

    auto net = discrete_net(false);
    auto gen = make_gen(1);
    at::Tensor dirty = sentence_tokens().clone();
    dirty[0][0] = tokenizer()->mask_id();
    EXPECT_THROW(net->loss({dirty, {}}, gen), std::invalid_argument);
    EXPECT_THROW(net->loss({sentence_tokens(), condition_tokens()}, gen), std::invalid_argument);  // no cond inputs
}

// ---------------------------------------------------------------------------------------------------------------

TEST(Config, DefaultsAreFilledInAndRoundTrip) {
    for (const std::string family : {"continuous", "discrete"}) {
        const auto net = nn::make_denoiser_net({{"family", family}, {"max_length", 20}}, *tokenizer());
        const json c = net->config();
        EXPECT_EQ(c["family"], family);
        EXPECT_EQ(c["vocab_size"], tokenizer()->vocab_size());
        EXPECT_EQ(c["dim"], 128);
        EXPECT_EQ(c["layers"], 4);
        EXPECT_EQ(c["heads"], 4);
        EXPECT_EQ(c["ff_dim"], 512);
        EXPECT_EQ(c["max_length"], 20);
        EXPECT_EQ(c["max_condition_length"], 64);
        EXPECT_DOUBLE_EQ(c["dropout"].get<double>(), 0.0);
        EXPECT_DOUBLE_EQ(c["condition_dropout"].get<double>(), 0.1);
        if (family == "continuous") {
            EXPECT_EQ(c["embed_dim"], 16);
            EXPECT_EQ(c["schedule"], json({{"name", "sqrt"}, {"T", 2000}}));
            EXPECT_FALSE(c.contains("mask_schedule"));
        } else {
            EXPECT_DOUBLE_EQ(c["mask_schedule"]["eps"].get<double>(), 1e-3);
            EXPECT_FALSE(c.contains("schedule"));
        }
        // Rebuilding from config() gives the same config and the same parameters (names and shapes).
        const auto again = nn::make_denoiser_net(c, *tokenizer());
        EXPECT_EQ(again->config(), c);
        const auto a = net->named_parameters(), b = again->named_parameters();
        ASSERT_EQ(a.size(), b.size());
        for (const auto& item : a) {
            ASSERT_TRUE(b.contains(item.key())) << item.key();
            EXPECT_EQ(b[item.key()].sizes(), item.value().sizes()) << item.key();
        }
    }
}

TEST(Config, EveryProblemIsReportedWithItsKey) {
    const auto& tok = *tokenizer();
    auto cont = [&](json c) { return [c, &tok] { nn::ContinuousDenoiserNet net(c, tok); }; };
    auto disc = [&](json c) { return [c, &tok] { nn::DiscreteDenoiserNet net(c, tok); }; };

    std::string e = config_error(cont({{"dim", 30}, {"heads", 4}}));
    EXPECT_NE(e.find("/heads"), std::string::npos) << e;
    e = config_error(cont({{"dim", 15}, {"heads", 1}}));
    EXPECT_NE(e.find("/dim: must be even"), std::string::npos) << e;
    e = config_error(cont({{"layrs", 2}}));
    EXPECT_NE(e.find("/layrs: unknown key 'layrs'; did you mean 'layers'?"), std::string::npos) << e;
    e = config_error(cont({{"schedule", {{"name", "sqrtt"}, {"T", 1}}}}));
    EXPECT_NE(e.find("/schedule/name"), std::string::npos) << e;
    EXPECT_NE(e.find("did you mean \"sqrt\""), std::string::npos) << e;
    EXPECT_NE(e.find("/schedule/T"), std::string::npos) << e;
    EXPECT_NE(e.find("2 problems"), std::string::npos) << e;
    e = config_error(cont({{"vocab_size", 7}}));
    EXPECT_NE(e.find("/vocab_size"), std::string::npos) << e;
    e = config_error(cont({{"family", "discrete"}}));
    EXPECT_NE(e.find("/family"), std::string::npos) << e;
    e = config_error(cont({{"mask_schedule", {{"eps", 0.1}}}}));  // a discrete key
    EXPECT_NE(e.find("/mask_schedule: unknown key"), std::string::npos) << e;
    e = config_error(cont({{"dropout", "high"}, {"max_length", 0}}));
    EXPECT_NE(e.find("/dropout"), std::string::npos) << e;
    EXPECT_NE(e.find("/max_length"), std::string::npos) << e;
    e = config_error(cont(json::array()));
    EXPECT_NE(e.find("expected an object"), std::string::npos) << e;

    e = config_error(disc({{"mask_schedule", {{"eps", 2.0}, {"epsilon", 1}}}}));
    EXPECT_NE(e.find("/mask_schedule/eps"), std::string::npos) << e;
    EXPECT_NE(e.find("/mask_schedule/epsilon"), std::string::npos) << e;
    e = config_error(disc({{"embed_dim", 16}}));  // a continuous key
    EXPECT_NE(e.find("/embed_dim: unknown key"), std::string::npos) << e;
    e = config_error(disc({{"max_condition_length", -1}}));
    EXPECT_NE(e.find("/max_condition_length"), std::string::npos) << e;

    e = config_error([&] { nn::make_denoiser_net({{"dim", 16}}, tok); });
    EXPECT_NE(e.find("/family"), std::string::npos) << e;
    e = config_error([&] { nn::make_denoiser_net({{"family", "masked"}}, tok); });
    EXPECT_NE(e.find("/family"), std::string::npos) << e;
}

// ---------------------------------------------------------------------------------------------------------------

TEST(Loss, IsAFiniteScalarThatReachesEveryParameter) {
    for (const std::string family : {"continuous", "discrete"}) {
        json config = micro_config(family, true);
        config["dropout"] = 0.1;
        config["condition_dropout"] = 0.5;
        at::manual_seed(0);
        const auto net = nn::make_denoiser_net(config, *tokenizer());
        net->train();
        auto gen = make_gen(5);
        const at::Tensor loss = net->loss({sentence_tokens(), condition_tokens()}, gen);
        ASSERT_EQ(loss.dim(), 0) << family;
        EXPECT_TRUE(std::isfinite(loss.item<double>())) << family;
        EXPECT_GT(loss.item<double>(), 0.0) << family;
        loss.backward();
        for (const auto& item : net->named_parameters()) {
            const at::Tensor& g = item.value().grad();
            ASSERT_TRUE(g.defined()) << family << " " << item.key();
            EXPECT_TRUE(g.isfinite().all().item<bool>()) << family << " " << item.key();
            EXPECT_GT(g.abs().sum().item<double>(), 0.0) << family << " " << item.key();
        }
        // The generator fixes every draw (times, noise, masks, condition and ordinary dropout).
        auto gen_a = make_gen(9), gen_b = make_gen(9);
        const double a = net->loss({sentence_tokens(), condition_tokens()}, gen_a).item<double>();
        const double b = net->loss({sentence_tokens(), condition_tokens()}, gen_b).item<double>();
        EXPECT_EQ(a, b) << family;
    }
}

// Guidance reads the discrete classifier two ways: tokens through an embedding lookup (log-probabilities alone, as
// exact scoring's batches do) and one-hot [B, L, V] through a matmul (the gradient); and only its target's spans
// of the L * L grid. Each must be the same function as the other.
TEST(TextClassifier, TokenAndOneHotInputsAndSelectedSpansAgreeWithTheFullForms) {
    json config = micro_config("discrete", false);
    config["tags"] = {"NN", "VBZ"};
    config["labels"] = {"S", "NP", "VP"};
    config["span_hidden"] = 8;
    at::manual_seed(4);
    nn::TextClassifierNet net(config, *tokenizer());
    net.eval();
    const at::Tensor tokens = sentence_tokens();
    const int64_t B = tokens.size(0), L = tokens.size(1);
    const at::Tensor t = at::full({B}, 0.4, at::kFloat);

    const at::Tensor one_hot = at::one_hot(tokens, net.vocab_size()).to(at::kFloat).requires_grad_(true);
    const at::Tensor h_one_hot = net.hidden(one_hot, t);
    const at::Tensor h_tokens = net.hidden(tokens, t);
    EXPECT_TRUE(at::allclose(h_tokens, h_one_hot, 1e-5, 1e-5));

    const at::Tensor grid = net.span_log_probs(h_one_hot);  // [B, L, L, C]
    const at::Tensor starts = at::tensor(std::vector<int64_t>{0, 2, 1, 0, 3}, at::kLong);
    const at::Tensor lasts = at::tensor(std::vector<int64_t>{L - 1, 4, 1, 2, 3}, at::kLong);
    const at::Tensor selected = net.span_log_probs(h_one_hot, starts, lasts);  // [B, 5, C]
    ASSERT_EQ(selected.sizes(), (at::IntArrayRef{B, 5, grid.size(3)}));
    for (int64_t k = 0; k < starts.size(0); ++k) {
        const at::Tensor from_grid = grid.select(1, starts[k].item<int64_t>()).select(1, lasts[k].item<int64_t>());
        EXPECT_TRUE(at::allclose(selected.select(1, k), from_grid, 1e-5, 1e-5)) << "span " << k;
    }
    // The gradient through the selected spans is the gradient through the same entries of the grid.
    const at::Tensor through_selected = torch::autograd::grad({selected.select(2, 2).sum()}, {one_hot}, {}, true)[0];
    at::Tensor from_grid_sum = at::zeros({}, at::kFloat);
    for (int64_t k = 0; k < starts.size(0); ++k)
        from_grid_sum =
            from_grid_sum +
            grid.select(1, starts[k].item<int64_t>()).select(1, lasts[k].item<int64_t>()).select(1, 2).sum();
    const at::Tensor through_grid = torch::autograd::grad({from_grid_sum}, {one_hot})[0];
    EXPECT_TRUE(at::allclose(through_selected, through_grid, 1e-5, 1e-6));
    EXPECT_GT(through_selected.abs().max().item<double>(), 0.0);
}

TEST(Gradients, FlowToTheContinuousInputOnly) {
    TransformerDenoiser den(continuous_net(true), tokenizer());
    auto gen = make_gen(6);
    const at::Tensor x = at::randn({2, 6, 16}, gen, at::kFloat).requires_grad_(true);
    const at::Tensor logp = den.logits_with_grad(x, 0.3, {meaning_representations()[1], ""});
    ASSERT_TRUE(logp.requires_grad());
    logp.select(2, 5).sum().backward();
    ASSERT_TRUE(x.grad().defined());
    EXPECT_GT(x.grad().abs().sum().item<double>(), 0.0);
    EXPECT_TRUE(x.grad().isfinite().all().item<bool>());
    for (const auto& p : den.network().parameters()) EXPECT_FALSE(p.grad().defined());
    // The same numbers as the no-grad path.
    EXPECT_TRUE(logp.detach().allclose(den.denoise(x.detach(), 0.3, {meaning_representations()[1], ""}).logits));

    TransformerDenoiser disc(discrete_net(false), tokenizer());
    EXPECT_THROW(disc.logits_with_grad(at::zeros({1, 4}, at::kLong), 0.5, {}), std::logic_error);
}

// ---------------------------------------------------------------------------------------------------------------

TEST(Weights, SavedParametersLoadBackToIdenticalOutputs) {
    for (const std::string family : {"continuous", "discrete"}) {
        TempDir dir;
        at::manual_seed(11);
        const auto net = nn::make_denoiser_net(micro_config(family, true), *tokenizer());
        save_safetensors(dir.path() / "weights.safetensors", parameters_of(*net));
        // Built from a different seed: equal outputs prove the weights came from the file.
        at::manual_seed(12);
        const auto loaded = load_transformer_denoiser(model_config(*net), dir.path(), tokenizer(),
                                                      family == "continuous" ? Family::continuous : Family::discrete);
        TransformerDenoiser original(net, tokenizer());
        ASSERT_EQ(loaded->family(), original.family());
        EXPECT_TRUE(loaded->traits().conditional);
        const std::vector<std::string> conditions = {meaning_representations()[3], ""};
        at::Tensor x;
        if (family == "continuous") {
            auto gen = make_gen(7);
            x = at::randn({2, kLength, 16}, gen, at::kFloat);
            EXPECT_TRUE(loaded->embedding().equal(original.embedding()));
        } else {
            x = sentence_tokens().slice(0, 0, 2).clone();
            x.slice(1, 2, 6).fill_(tokenizer()->mask_id());
        }
        const DenoiserOutput a = original.denoise(x, 0.6, conditions), b = loaded->denoise(x, 0.6, conditions);
        EXPECT_TRUE(a.logits.equal(b.logits)) << family;
        EXPECT_EQ(a.x0.defined(), b.x0.defined());
        if (a.x0.defined()) {
            EXPECT_TRUE(a.x0.equal(b.x0));
        }
    }
}

TEST(Weights, MissingExtraOrMisshapedTensorsAreNamed) {
    TempDir dir;
    at::manual_seed(13);
    const auto net = nn::make_denoiser_net(micro_config("discrete", true), *tokenizer());
    const json config = model_config(*net);
    auto load_error = [&](const std::vector<std::pair<std::string, at::Tensor>>& tensors) -> std::string {
        save_safetensors(dir.path() / "weights.safetensors", tensors);
        try {
            load_transformer_denoiser(config, dir.path(), tokenizer(), Family::discrete);
        } catch (const ModelError& e) {
            return e.what();
        }
        return "";
    };
    auto tensors = parameters_of(*net);
    const auto target = std::find_if(tensors.begin(), tensors.end(),
                                     [](const auto& p) { return p.first == "trunk.condition_position"; });
    ASSERT_NE(target, tensors.end());
    const auto index = static_cast<size_t>(target - tensors.begin());

    auto missing = tensors;
    missing.erase(missing.begin() + static_cast<std::ptrdiff_t>(index));
    std::string e = load_error(missing);
    EXPECT_NE(e.find("missing tensor 'trunk.condition_position'"), std::string::npos) << e;
    EXPECT_NE(e.find("weights.safetensors"), std::string::npos) << e;

    auto misshaped = tensors;
    misshaped[index].second = at::zeros({kConditionLength + 1, 16});
    e = load_error(misshaped);
    EXPECT_NE(e.find("'trunk.condition_position'"), std::string::npos) << e;
    EXPECT_NE(e.find("[17, 16]"), std::string::npos) << e;

    auto extra = tensors;
    extra.emplace_back("trunk.blocks.1.qkv.weight", at::zeros({48, 16}));
    e = load_error(extra);
    EXPECT_NE(e.find("'trunk.blocks.1.qkv.weight'"), std::string::npos) << e;

    auto other_dtype = tensors;
    other_dtype[0].second = other_dtype[0].second.to(at::kDouble);
    e = load_error(other_dtype);
    EXPECT_NE(e.find("'" + tensors[0].first + "'"), std::string::npos) << e;

    EXPECT_EQ(load_error(tensors), "");
}

// A model folder whose weights file adds a tensor of `extra_bytes` the network does not have: the header is
// rewritten by hand and the file extended (sparsely) so the extra tensor costs no disk.
void add_unexpected_tensor(const fs::path& file, uint64_t extra_bytes) {
    std::ifstream in(file, std::ios::binary);
    unsigned char length[8];
    in.read(reinterpret_cast<char*>(length), 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | length[i];
    std::string header(n, '\0');
    in.read(header.data(), static_cast<std::streamsize>(n));
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    json parsed = json::parse(header);
    parsed["unused.huge"] = {
        {"dtype", "U8"}, {"shape", {extra_bytes}}, {"data_offsets", {data.size(), data.size() + extra_bytes}}};
    std::string text = parsed.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    uint64_t m = text.size();
    for (int i = 0; i < 8; ++i, m >>= 8) out.put(static_cast<char>(m & 0xff));
    out << text << data;
    out.close();
    fs::resize_file(file, 8 + text.size() + data.size() + extra_bytes);
}

TEST(Weights, ATensorTheNetworkLacksIsRefusedBeforeAnyDataIsRead) {
    TempDir dir;
    at::manual_seed(16);
    const auto net = nn::make_denoiser_net(micro_config("discrete", false), *tokenizer());
    save_safetensors(dir.path() / "weights.safetensors", parameters_of(*net));
    // 4 GB of (sparse) data: reading it would take gigabytes of memory and tens of seconds.
    constexpr uint64_t kExtra = 4ull << 30;
    add_unexpected_tensor(dir.path() / "weights.safetensors", kExtra);
    ASSERT_GT(fs::file_size(dir.path() / "weights.safetensors"), kExtra);
    try {
        load_transformer_denoiser(model_config(*net), dir.path(), tokenizer(), Family::discrete);
        FAIL() << "a file with a tensor the network lacks was accepted";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("unexpected tensor 'unused.huge'"), std::string::npos) << e.what();
    }
    struct rusage usage {};
    ::getrusage(RUSAGE_SELF, &usage);
    EXPECT_LT(usage.ru_maxrss, 1L << 20) << "peak resident memory " << usage.ru_maxrss << " KB: the tensor was read";
}

// A model whose weights hold NaN used to give every sample "" with success; the run now stops at the first step
// and blames the model, in both families.
TEST(Faults, NanWeightsStopTheRunNamingTheModel) {
    for (const std::string family : {"discrete", "continuous"}) {
        TempDir dir;
        at::manual_seed(17);
        const auto net = nn::make_denoiser_net(micro_config(family, false), *tokenizer());
        auto tensors = parameters_of(*net);
        for (auto& [name, tensor] : tensors)
            if (name.find("out") != std::string::npos || name.find("trunk.blocks.0") != std::string::npos)
                tensor.fill_(std::numeric_limits<float>::quiet_NaN());
        save_safetensors(dir.path() / "weights.safetensors", tensors);
        static_cast<const WordTokenizer&>(*tokenizer()).save((dir.path() / "vocab.txt").string());
        json config = model_config(*net);
        config["format_version"] = 1;
        config["type"] = "transformer";
        config["families"] = {family};
        config["tokenizer"] = {{"type", "word"}, {"vocab", "vocab.txt"}};
        std::ofstream(dir.path() / "config.json") << config.dump();
        plugins::Registry no_plugins(std::vector<fs::path>{});
        Generator generator(parse_recipe(R"({"model": ")" + dir.path().string() +
                                             R"(", "sampler": {"steps": 5}, "samples": 2, "max_length": 8})",
                                         "."),
                            no_plugins, {});
        try {
            generator.generate();
            ADD_FAILURE() << family << ": a model with NaN weights generated";
        } catch (const GenerationFault& e) {
            EXPECT_NE(std::string(e.what()).find("step 1"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("are its weights finite?"), std::string::npos) << e.what();
        }
    }
}

TEST(Weights, AVocabularyOfAnotherSizeThanTheNetworksIsRefusedNamingBoth) {
    TempDir dir;
    at::manual_seed(15);
    const auto net = nn::make_denoiser_net(micro_config("discrete", false), *tokenizer());
    save_safetensors(dir.path() / "weights.safetensors", parameters_of(*net));
    std::vector<std::string> lines = sentences();
    lines.insert(lines.end(), meaning_representations().begin(), meaning_representations().end());
    lines.push_back("zyzzyva");  // one word the network never saw
    const auto bigger = std::make_shared<const WordTokenizer>(WordTokenizer::build(lines));
    ASSERT_EQ(bigger->vocab_size(), tokenizer()->vocab_size() + 1);
    try {
        load_transformer_denoiser(model_config(*net), dir.path(), bigger, Family::discrete);
        FAIL() << "a vocabulary of another size was accepted";
    } catch (const ModelError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("config.json"), std::string::npos) << what;
        EXPECT_NE(what.find("/vocab_size: the network was built for " + std::to_string(tokenizer()->vocab_size()) +
                            " tokens but the tokenizer has " + std::to_string(bigger->vocab_size())),
                  std::string::npos)
            << what;
    }
}

TEST(Weights, ModelConfigProblemsNameTheFileAndKey) {
    TempDir dir;
    at::manual_seed(14);
    const auto net = nn::make_denoiser_net(micro_config("continuous", false), *tokenizer());
    save_safetensors(dir.path() / "weights.safetensors", parameters_of(*net));
    auto error = [&](const json& config, Family family) -> std::string {
        try {
            load_transformer_denoiser(config, dir.path(), tokenizer(), family);
        } catch (const ModelError& e) {
            return e.what();
        }
        return "";
    };
    const json good = model_config(*net);
    EXPECT_EQ(error(good, Family::continuous), "");

    std::string e = error(good, Family::discrete);
    EXPECT_NE(e.find("config.json"), std::string::npos) << e;
    EXPECT_NE(e.find("discrete"), std::string::npos) << e;

    json bad_schedule = good;
    bad_schedule["schedule"]["T"] = 2000;
    e = error(bad_schedule, Family::continuous);
    EXPECT_NE(e.find("'schedule'"), std::string::npos) << e;

    json bad_network = good;
    bad_network["network"]["heads"] = 3;
    e = error(bad_network, Family::continuous);
    EXPECT_NE(e.find("/heads"), std::string::npos) << e;

    json no_weights = good;
    no_weights.erase("weights");
    e = error(no_weights, Family::continuous);
    EXPECT_NE(e.find("'weights'"), std::string::npos) << e;

    json missing_file = good;
    missing_file["weights"] = "nowhere.safetensors";
    e = error(missing_file, Family::continuous);
    EXPECT_NE(e.find("nowhere.safetensors"), std::string::npos) << e;

    // A model folder names files inside itself: a path that leaves it is refused before anything is opened.
    for (const std::string escape : {"../weights.safetensors", "/etc/passwd", "sub/../../x.safetensors", "", "."}) {
        json outside = good;
        outside["weights"] = escape;
        e = error(outside, Family::continuous);
        EXPECT_NE(e.find("is not a file inside the model's folder"), std::string::npos) << escape << ": " << e;
    }
    json inside = good;
    inside["weights"] = "./sub/../weights.safetensors";
    EXPECT_EQ(error(inside, Family::continuous), "");

    // Sizes within the config's bounds that the weights file cannot hold (the network would take 344 GB to build)
    // are refused before the network is built.
    json huge = good;
    huge["network"]["dim"] = 8192;
    huge["network"]["ff_dim"] = 65536;
    huge["network"]["layers"] = 64;
    e = error(huge, Family::continuous);
    EXPECT_NE(e.find("'network' makes at least 85899444224 parameters, 160.0 GiB of weights at 2 bytes each, but "
                     "'weights.safetensors' holds "),
              std::string::npos)
        << e;
    // So is a weights file that is not there: nothing to measure, so nothing is built.
    huge["weights"] = "nowhere.safetensors";
    e = error(huge, Family::continuous);
    EXPECT_NE(e.find("nowhere.safetensors': cannot read: No such file or directory"), std::string::npos) << e;
}

// ---------------------------------------------------------------------------------------------------------------
// CDCD

json cdcd_config(bool self_conditioning) {
    json c = micro_config("continuous", true);
    c["objective"] = "cdcd";
    c["self_conditioning"] = self_conditioning;
    c["embed_dim"] = 8;
    c["schedule"] = {{"name", "cdcd"}, {"T", 100}, {"sigma_min", 1.0}, {"sigma_max", 50.0}, {"warp_bins", 10}};
    return c;
}

TEST(Cdcd, TheNetworkPredictsADistributionWhoseMeanEmbeddingIsX0OverNormalisedRows) {
    at::manual_seed(3);
    nn::ContinuousDenoiserNet net(cdcd_config(true), *tokenizer());
    net.eval();
    at::NoGradGuard no_grad;
    const at::Tensor E = net.diffused_embedding();
    EXPECT_TRUE(at::allclose(E.norm(2, -1), at::full({E.size(0)}, std::sqrt(8.0)), 1e-5, 1e-5));
    auto gen = make_gen(4);
    const at::Tensor x = at::randn({3, kLength, 8}, gen);
    const at::Tensor t = at::full({3}, 0.4);
    const at::Tensor logits = net.clean_logits(x, t, {});
    ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{3, kLength, tokenizer()->vocab_size()}));
    EXPECT_TRUE(at::allclose(net.predict_x0(x, t, {}), at::matmul(at::softmax(logits, -1), E), 1e-5, 1e-6));
    // Self-conditioning is an input: another previous estimate, another prediction; none is the zero estimate.
    const at::Tensor estimate = at::randn({3, kLength, 8}, gen);
    EXPECT_FALSE(at::allclose(net.clean_logits(x, t, {}, estimate), logits));
    EXPECT_TRUE(at::allclose(net.clean_logits(x, t, {}, at::zeros_like(estimate)), logits, 1e-5, 1e-6));
    EXPECT_THROW(net.clean_logits(x, t, {}, at::zeros({3, kLength, 4})), std::invalid_argument);
    // The Diffusion-LM objective has no distribution head.
    EXPECT_THROW(continuous_net(false)->clean_logits(at::randn({1, kLength, 16}), at::full({1}, 0.5), {}),
                 std::logic_error);

    const auto names = net.named_parameters();
    for (const char* name : {"embedding", "head.weight", "self_condition_proj.weight", "input_proj.weight"})
        EXPECT_TRUE(names.contains(name)) << name;
    EXPECT_FALSE(names.contains("output_proj.weight"));
    EXPECT_TRUE(net.named_buffers().contains("warp_loss"));
}

// Training moves the warp toward the noise levels where the loss still changes, and the model's config carries
// the warp the weights' running means give, so a model folder loads back to the same schedule.
TEST(Cdcd, TrainingLearnsTheWarpAndTheModelFolderCarriesIt) {
    at::manual_seed(5);
    json config = cdcd_config(false);
    config["schedule"]["warp_uniform"] = 0.05;
    auto net = std::make_shared<nn::ContinuousDenoiserNet>(config, *tokenizer());
    const std::vector<double> uniform = net->config()["schedule"]["warp"].get<std::vector<double>>();
    for (size_t j = 0; j < uniform.size(); ++j) EXPECT_NEAR(uniform[j], static_cast<double>(j) / 10.0, 1e-12);
    const nn::TrainingBatch batch{sentence_tokens().repeat({4, 1}), condition_tokens().repeat({4, 1})};
    torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(3e-3));
    auto gen = make_gen(6);
    net->train();
    for (int step = 0; step < 40; ++step) {
        adam.zero_grad();
        net->loss(batch, gen).backward();
        adam.step();
    }
    const std::vector<double> learned = net->config()["schedule"]["warp"].get<std::vector<double>>();
    ASSERT_EQ(learned.size(), 11u);
    double most = 0.0;
    for (size_t j = 0; j + 1 < learned.size(); ++j) {
        EXPECT_GE(learned[j + 1] - learned[j], 0.05 / 10 - 1e-12) << j;
        most = std::max(most, learned[j + 1] - learned[j]);
    }
    EXPECT_GT(most, 0.2) << "the warp stayed near uniform";
    EXPECT_EQ(net->schedule().warp()->cdf(), learned);

    TempDir dir;
    save_safetensors(dir.path() / "weights.safetensors", nn::module_tensors(*net));
    const json model = model_config(*net);
    const auto den = load_transformer_denoiser(model, dir.path(), tokenizer(), Family::continuous);
    EXPECT_TRUE(at::allclose(den->embedding(), net->diffused_embedding().detach()));
    json other = model;
    other["schedule"]["warp"] = uniform;
    try {
        load_transformer_denoiser(other, dir.path(), tokenizer(), Family::continuous);
        ADD_FAILURE() << "a warp other than the weights' was taken";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("'schedule'"), std::string::npos) << e.what();
    }
}

TEST(Cdcd, ConfigProblemsAreNamed) {
    const auto& tok = *tokenizer();
    auto cont = [&](json c) { return [c, &tok] { nn::ContinuousDenoiserNet net(c, tok); }; };
    json c = cdcd_config(true);
    c["schedule"] = {{"name", "sqrt"}};
    std::string e = config_error(cont(c));
    EXPECT_NE(e.find("/objective: the \"cdcd\" objective and the \"cdcd\" schedule go together"), std::string::npos)
        << e;
    e = config_error(cont({{"self_conditioning", true}}));
    EXPECT_NE(e.find("/self_conditioning"), std::string::npos) << e;
    c = cdcd_config(false);
    c["schedule"]["warp"] = {0.0, 0.5, 1.0};
    e = config_error(cont(c));
    EXPECT_NE(e.find("/schedule/warp"), std::string::npos) << e;
    EXPECT_NE(e.find("warp_bins + 1 = 11"), std::string::npos) << e;
    c["schedule"]["warp"] = {0.0, 0.1, 0.2, 0.3, 0.25, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};
    e = config_error(cont(c));
    EXPECT_NE(e.find("decreases"), std::string::npos) << e;
    c = cdcd_config(false);
    c["schedule"]["sigma_max"] = 0.5;
    c["schedule"]["warp_uniform"] = 1.5;
    e = config_error(cont(c));
    EXPECT_NE(e.find("/schedule/sigma_max"), std::string::npos) << e;
    EXPECT_NE(e.find("/schedule/warp_uniform"), std::string::npos) << e;
    // "cdcd" keys belong to the "cdcd" schedule.
    e = config_error(cont({{"schedule", {{"name", "sqrt"}, {"sigma_max", 10}}}}));
    EXPECT_NE(e.find("/schedule/sigma_max: unknown key"), std::string::npos) << e;
}

TEST(ScoreEntropyNet, ConfigChoosesTheObjectiveAndGraphAndRoundTrips) {
    const auto& tok = *tokenizer();
    auto disc = [&](json c) { return [c, &tok] { nn::DiscreteDenoiserNet net(c, tok); }; };
    json c = micro_config("discrete", false);
    c["graph"] = "uniform";
    std::string e = config_error(disc(c));
    EXPECT_NE(e.find("/graph: the uniform graph is trained with the \"score_entropy\" objective"), std::string::npos)
        << e;
    c["objective"] = "score_entropy";
    c["uniform_schedule"] = {{"sigma_min", 5.0}, {"sigma_max", 2.0}};
    e = config_error(disc(c));
    EXPECT_NE(e.find("/uniform_schedule/sigma_max"), std::string::npos) << e;
    c["uniform_schedule"] = {{"sigma_min", 1e-3}, {"sigma_max", 10.0}};
    nn::DiscreteDenoiserNet uniform(c, tok);
    EXPECT_TRUE(uniform.uniform());
    EXPECT_NEAR(uniform.uniform_schedule().sigma_bar(0.0), 1e-3, 1e-15);
    EXPECT_NEAR(uniform.uniform_schedule().sigma_bar(1.0), 10.0, 1e-12);
    const double h = 1e-6;  // the rate is the total noise's derivative
    EXPECT_NEAR(
        uniform.uniform_schedule().sigma(0.5),
        (uniform.uniform_schedule().sigma_bar(0.5 + h) - uniform.uniform_schedule().sigma_bar(0.5 - h)) / (2 * h),
        1e-5);
    const json j = uniform.config();
    EXPECT_EQ(j["objective"], "score_entropy");
    EXPECT_EQ(j["graph"], "uniform");
    EXPECT_EQ(nn::DiscreteDenoiserNet(j, tok).config(), j);
    // Defaults are not written: a SUBS model's config stays as it was.
    EXPECT_FALSE(nn::DiscreteDenoiserNet(micro_config("discrete", false), tok).config().contains("objective"));
    // The absorbing graph takes no uniform schedule, and the continuous family has neither key.
    json absorb = micro_config("discrete", false);
    absorb["objective"] = "score_entropy";
    absorb["uniform_schedule"] = {{"sigma_min", 1e-3}};
    e = config_error(disc(absorb));
    EXPECT_NE(e.find("/uniform_schedule: unknown key"), std::string::npos) << e;
    json cont = micro_config("continuous", false);
    cont["objective"] = "score_entropy";
    e = config_error([&] { nn::ContinuousDenoiserNet net(cont, tok); });
    EXPECT_NE(e.find("/objective"), std::string::npos) << e;
}

}  // namespace
}  // namespace rudder
