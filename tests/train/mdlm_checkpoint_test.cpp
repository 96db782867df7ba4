// The mdlm kind: MDLM's DiT trained by `rudder train` on E2E as prompted texts, written as a Hugging Face MDLM folder
// that loads through the code a downloaded MDLM takes. The trainable network is the loaded one (same names, same
// forward), a prompt is never noised in training, and the written folder is a model a recipe samples after a prompt.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include <rudder/nn/denoiser_net.hpp>
#include <rudder/nn/dit_checkpoint.hpp>
#include <rudder/nn/dit_trainable.hpp>
#include <rudder/nn/safetensors.hpp>
#include <rudder/nn/weights.hpp>
#include <rudder/plugins/plugins.hpp>
#include <rudder/runtime/generator.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/runtime/recipe.hpp>
#include <rudder/syntax/classifier.hpp>
#include <rudder/text/bpe_tokenizer.hpp>
#include <rudder/text/meaning.hpp>
#include <rudder/text/text_files.hpp>
#include <rudder/train/trainer.hpp>

#include "train_support.hpp"

namespace rudder {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// UTF-8 of a code point below 0x800.
std::string utf8(int code) {
    if (code < 0x80) return std::string(1, static_cast<char>(code));
    return {static_cast<char>(0xc0 | (code >> 6)), static_cast<char>(0x80 | (code & 0x3f))};
}

// A byte-level BPE tokenizer.json in GPT-2's layout: the 256 byte symbols in GPT-2's order (the printable bytes as
// themselves, the others from U+0100 on: space is "Ġ", newline "Ċ"), a few merges, then "<|endoftext|>".
void write_micro_tokenizer(const fs::path& file) {
    json vocab = json::object();
    const auto printable = [](int b) { return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae; };
    for (int b = 0; b < 256; ++b)
        if (printable(b)) vocab[utf8(b)] = static_cast<int>(vocab.size());
    for (int b = 0, shifted = 0; b < 256; ++b)
        if (!printable(b)) vocab[utf8(256 + shifted++)] = static_cast<int>(vocab.size());
    const std::vector<std::pair<std::string, std::string>> merges = {
        {"\u0120", "t"}, {"\u0120t", "h"}, {"\u0120th", "e"}, {"e", "r"}, {"\u0120", "\""}, {"\"", ":"}};
    json merge_list = json::array();
    for (const auto& [left, right] : merges) {
        vocab[left + right] = static_cast<int>(vocab.size());
        merge_list.push_back({left, right});
    }
    const int end = static_cast<int>(vocab.size());
    const json tokenizer = {
        {"version", "1.0"},
        {"added_tokens",
         {{{"id", end},
           {"content", "<|endoftext|>"},
           {"single_word", false},
           {"lstrip", false},
           {"rstrip", false},
           {"normalized", true},
           {"special", true}}}},
        {"normalizer", nullptr},
        {"pre_tokenizer",
         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
        {"post_processor", nullptr},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", ""},
          {"end_of_word_suffix", ""},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"vocab", vocab},
          {"merges", merge_list}}}};
    std::ofstream(file) << tokenizer.dump(1);
}

class MdlmCheckpointTraining : public ::testing::Test {
protected:
    void SetUp() override {
        test::write_micro_csv(dir_.path() / "train.csv", test::micro_records());
        write_micro_tokenizer(dir_.path() / "tokenizer.json");
    }
    json config(int64_t steps) const {
        return {{"kind", "mdlm"},
                {"data", {{"train", "train.csv"}, {"dev", "train.csv"}, {"dev_every", 20}, {"dev_max_texts", 12}}},
                {"tokenizer", {{"file", "tokenizer.json"}}},
                {"network", {{"hidden_dim", 32}, {"cond_dim", 16}, {"n_blocks", 1}, {"n_heads", 2}, {"dropout", 0.1}}},
                {"training",
                 {{"steps", steps},
                  {"batch_size", 12},
                  {"lr", 0.01},
                  {"warmup", 5},
                  {"seed", 3},
                  {"threads", 1},
                  {"log_every", 10},
                  {"checkpoint_every", 0}}},
                {"max_length", 160},
                {"out", "model"}};
    }
    train::TrainConfig parse(const json& j) const { return train::parse_train_config(j, dir_.path()); }

    test::ScratchDir dir_;
};

// Random values for every parameter (the DiT starts with its adaLN and output layer at zero, which would hide a
// wrong name or a wrong forward).
void randomize(torch::nn::Module& module) {
    at::NoGradGuard no_grad;
    at::manual_seed(5);
    for (auto& p : module.parameters()) p.normal_(0.0, 0.3);
}

TEST(DitTrainable, TheWeightsItWritesLoadAsAnMdlmCheckpointThatComputesWhatItComputes) {
    test::ScratchDir dir;
    write_micro_tokenizer(dir.path() / "tokenizer.json");
    BpeSpecialNames names;
    names.pad = "<|endoftext|>";
    const WithMaskToken tokenizer(
        std::make_shared<BpeTokenizer>(BpeTokenizer::load_json((dir.path() / "tokenizer.json").string(), names)));
    nn::DitTrainableNet net({{"hidden_dim", 32},
                             {"cond_dim", 16},
                             {"n_blocks", 2},
                             {"n_heads", 4},
                             {"max_length", 24},
                             {"time_conditioning", true}},
                            tokenizer);
    randomize(net);
    net.eval();
    save_safetensors(dir.path() / "model.safetensors", nn::module_tensors(net), {{"format", "pt"}});
    std::ofstream(dir.path() / "config.json") << net.hub_config().dump(2);
    ASSERT_EQ(net.hub_config()["model_type"], "mdlm");
    ASSERT_EQ(net.hub_config()["vocab_size"], tokenizer.vocab_size());

    const nn::DitNetwork loaded = nn::DitNetwork::load(dir.path());  // every tensor present, of its shape, no other
    EXPECT_EQ(loaded.config().mask_id(), tokenizer.mask_id());
    EXPECT_TRUE(loaded.config().time_conditioning);
    at::manual_seed(9);
    at::Tensor tokens = at::randint(0, tokenizer.vocab_size() - 1, {3, 24}, at::kLong);
    tokens.index_put_({at::indexing::Slice(), at::indexing::Slice(10, 20)}, tokenizer.mask_id());
    const at::Tensor sigma = at::tensor({0.1f, 1.0f, 3.0f});
    // The trainable network's loss reads the same forward: its loss at a fixed generator equals SUBS over the
    // loaded network's output at the noise it drew.
    at::Generator gen = at::detail::createCPUGenerator(11);
    at::Generator same = at::detail::createCPUGenerator(11);
    const at::Tensor clean = tokens.masked_fill(tokens.eq(tokenizer.mask_id()), 1);
    const double loss = net.loss(nn::TrainingBatch(clean), gen).item<double>();
    const nn::SubsNoise noise = nn::draw_subs_noise(clean, tokenizer.mask_id(), 1e-3, same);
    const at::Tensor sigmas = -at::log1p(-(1.0 - 1e-3) * noise.t).to(at::kFloat);
    const at::Tensor log_p = loaded.clean_log_probs(noise.x_t, sigmas);
    const at::Tensor nll = -log_p.gather(-1, clean.unsqueeze(-1)).squeeze(-1);
    const at::Tensor weight = (1.0 / noise.t).to(at::kFloat).unsqueeze(1);
    const double expected = (nll * noise.masked * weight).sum().item<double>() / static_cast<double>(clean.numel());
    EXPECT_NEAR(loss, expected, 1e-4 * std::abs(expected));
    // And the loaded network differs with sigma (time conditioning on), as the trainable one was built.
    EXPECT_FALSE(at::allclose(loaded.forward(tokens, sigma), loaded.forward(tokens, sigma.flip(0))));
}

TEST(DitTrainable, APromptIsNeverNoised) {
    at::Generator gen = at::detail::createCPUGenerator(2);
    const at::Tensor tokens = at::zeros({64, 40}, at::kLong);
    const at::Tensor clean = at::arange(40).unsqueeze(0).lt(at::randint(0, 40, {64, 1}, at::kLong));
    const nn::SubsNoise noise = nn::draw_subs_noise(tokens, 7, 1e-3, gen, clean);
    EXPECT_FALSE(noise.masked.logical_and(clean).any().item<bool>());
    EXPECT_TRUE(noise.masked.any().item<bool>());
    EXPECT_TRUE(noise.x_t.eq(7).equal(noise.masked));
}

TEST(DitTrainable, RefusesABadNetworkConfigAtItsKey) {
    test::ScratchDir dir;
    write_micro_tokenizer(dir.path() / "tokenizer.json");
    BpeSpecialNames names;
    names.pad = "<|endoftext|>";
    const auto bpe =
        std::make_shared<BpeTokenizer>(BpeTokenizer::load_json((dir.path() / "tokenizer.json").string(), names));
    try {
        nn::DitTrainableNet({{"hidden_dim", 30}, {"n_heads", 4}, {"max_length", 8}, {"layers", 2}}, WithMaskToken(bpe));
        ADD_FAILURE() << "accepted";
    } catch (const ConfigError& e) {
        std::string all;
        for (const auto& issue : e.issues()) all += issue.pointer + ": " + issue.message + "\n";
        EXPECT_NE(all.find("/n_heads: hidden_dim (30) must split into 4 heads of an even width"), std::string::npos)
            << all;
        EXPECT_NE(all.find("/layers: unknown key"), std::string::npos) << all;
    }
    // Without the mask after its last id the tokenizer is not the DiT's.
    EXPECT_THROW(nn::DitTrainableNet({{"max_length", 8}}, *bpe), ConfigError);
}

TEST_F(MdlmCheckpointTraining, TrainsIntoAnMdlmFolderThatARecipeSamplesAfterAPrompt) {
    const train::TrainResult result = train::train(parse(config(60)));
    ASSERT_TRUE(result.finished);
    EXPECT_EQ(result.texts, 90) << "30 rows, three texts each";
    const fs::path model = dir_.path() / "model";
    for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "training.json", "train_log.jsonl"})
        EXPECT_TRUE(fs::exists(model / file)) << file;
    EXPECT_FALSE(fs::exists(model / "vocab.txt"));
    EXPECT_FALSE(fs::exists(model / "checkpoint"));
    const json config = read_json_file(model / "config.json");
    EXPECT_EQ(config["model_type"], "mdlm");
    EXPECT_EQ(config["model_length"], 160);
    EXPECT_EQ(config["hidden_dim"], 32);
    EXPECT_EQ(read_json_file(model / "training.json")["training"]["steps"], 60);

    std::vector<json> log;
    for (const auto& line : read_lines(model / "train_log.jsonl"))
        if (!line.empty()) log.push_back(json::parse(line));
    ASSERT_EQ(log.size(), 6u);
    EXPECT_LT(log.back()["loss"].get<double>(), 0.7 * log.front()["loss"].get<double>());
    EXPECT_TRUE(log.back()["dev_loss"].is_number());

    const json description = describe_model(model);
    EXPECT_EQ(description["format"], "public checkpoint (Hugging Face layout)") << description.dump();
    EXPECT_NE(description["kind"].get<std::string>().find("MDLM"), std::string::npos) << description.dump();
    const Model loaded = load_model(model, std::nullopt);
    EXPECT_EQ(loaded.family, Family::discrete);
    EXPECT_EQ(loaded.tokenizer->token(loaded.tokenizer->pad_id()), "<|endoftext|>");

    // Data-to-text as a recipe asks for it: the prompt is the span's prefix, the answer is generated after it.
    const std::string prompt =
        meaning::data_to_text_prompt(meaning::record_json("name[Aromi], food[French], area[riverside]"));
    plugins::Registry registry({fs::path(RUDDER_TEST_PLUGIN_DIR)});
    const json recipe = {{"model", model.string()},
                         {"sampler", {{"name", "analytic"}, {"steps", 16}}},
                         {"samples", 2},
                         {"seed", 1},
                         {"controllers", {{{"plugin", "span"}, {"params", {{"prefix", prompt}}}}}}};
    Generator generator(parse_recipe(recipe.dump(), "."), registry);
    const auto samples = generator.generate();
    ASSERT_EQ(samples.size(), 2u);
    for (const auto& sample : samples) EXPECT_EQ(sample.text.rfind(prompt, 0), 0u) << sample.text;
}

// A noisy attribute classifier for an MDLM checkpoint (`rudder train-controller` with the checkpoint as its
// denoiser): it takes the checkpoint's BPE tokenizer, mask and schedule and writes them beside its weights, learns the
// class from the text (here the food, named as the sentiment controller's polarities), and guides and judges the
// sentiment controller on a recipe of that checkpoint. A syntax classifier, which tags each token as a word, is
// refused for it.
TEST_F(MdlmCheckpointTraining, AnAttributeClassifierLearnsTheCheckpointsTokensAndGuidesItsRecipes) {
    json mdlm = config(5);
    mdlm["max_length"] = 64;
    ASSERT_TRUE(train::train(parse(mdlm)).finished);
    const json attribute = {{"field", "food"},
                            {"classes", {{"negative", {"Italian", "Chinese"}}, {"positive", {"French"}}}}};
    json classifier = {
        {"kind", "attribute_classifier"},
        {"denoiser", "model"},
        {"data", {{"train", "train.csv"}, {"dev", "train.csv"}, {"dev_every", 100}, {"attribute", attribute}}},
        {"network", {{"dim", 32}, {"layers", 1}, {"heads", 2}, {"ff_dim", 64}}},
        {"training",
         {{"steps", 200},
          {"batch_size", 16},
          {"lr", 0.005},
          {"warmup", 10},
          {"seed", 1},
          {"threads", 1},
          {"log_every", 100},
          {"checkpoint_every", 0}}},
        {"max_length", 64},
        {"out", "classifier"}};
    const train::TrainResult result = train::train(parse(classifier));
    ASSERT_TRUE(result.finished);
    const fs::path out = dir_.path() / "classifier";
    const json written = read_json_file(out / "config.json");
    EXPECT_EQ(written["tokenizer"],
              (json{{"type", "bpe"}, {"file", "tokenizer.json"}, {"pad", "<|endoftext|>"}, {"mask", "<mask>"}}));
    EXPECT_TRUE(fs::exists(out / "tokenizer.json"));
    EXPECT_FALSE(fs::exists(out / "vocab.txt"));
    EXPECT_EQ(written["network"]["family"], "discrete");
    EXPECT_EQ(written["network"]["mask_schedule"], (json{{"eps", 1e-3}}));

    // The checkpoint's tokens, id for id (what the sentiment controller checks before a run).
    const Model model = load_model(dir_.path() / "model", std::nullopt);
    const auto loaded = syntax::TextClassifier::load(out, "attribute_classifier");
    ASSERT_EQ(loaded->vocab_size(), model.tokenizer->vocab_size());
    for (int64_t id = 0; id < model.tokenizer->vocab_size(); ++id)
        ASSERT_EQ(loaded->token(id), model.tokenizer->token(id)) << id;
    // Training texts, clean, classed by their food.
    EXPECT_GT(loaded->class_log_probs("Zizzi serves French food in the city centre.")[1], std::log(0.5));
    EXPECT_GT(loaded->class_log_probs("In the riverside, Zizzi serves Chinese food.")[0], std::log(0.5));

    plugins::Registry registry({fs::path(RUDDER_TEST_PLUGIN_DIR)});
    const json recipe = {
        {"model", (dir_.path() / "model").string()},
        {"sampler", {{"name", "analytic"}, {"steps", 16}}},
        {"samples", 2},
        {"seed", 1},
        {"controllers",
         {{{"plugin", "sentiment"},
           {"weight", 5.0},
           {"params", {{"polarity", "positive"}, {"classifier", out.string()}, {"judge", out.string()}}}}}}};
    Generator generator(parse_recipe(recipe.dump(), "."), registry);
    const auto samples = generator.generate();
    ASSERT_EQ(samples.size(), 2u);
    for (const auto& sample : samples) {
        ASSERT_EQ(sample.controls.size(), 1u);
        EXPECT_NEAR(sample.controls[0].verdict.score, std::exp(loaded->class_log_probs(sample.text)[1]), 1e-6)
            << sample.text;
    }

    classifier["kind"] = "syntax_classifier";
    classifier["data"].erase("attribute");
    try {
        parse(classifier);
        ADD_FAILURE() << "a syntax classifier for a BPE checkpoint was accepted";
    } catch (const ConfigError& e) {
        std::string all;
        for (const auto& issue : e.issues()) all += issue.pointer + ": " + issue.message + "\n";
        EXPECT_NE(all.find("/denoiser: '"), std::string::npos) << all;
        EXPECT_NE(all.find("needs a word-level denoiser"), std::string::npos) << all;
    }
}

TEST(PromptFormat, AMeaningRepresentationIsAJsonRecordInItsOrder) {
    const std::string record =
        meaning::record_json("name[Caf\u00e9 \"Rouge\"], customer rating[5 out of 5], near[The Bakers]");
    EXPECT_EQ(record,
              "{\"name\": \"Caf\u00e9 \\\"Rouge\\\"\", \"customer rating\": \"5 out of 5\", \"near\": \"The Bakers\"}");
    EXPECT_EQ(json::parse(record)["name"], "Caf\u00e9 \"Rouge\"");
    EXPECT_THROW(meaning::record_json("name[A], name[B]"), std::invalid_argument);
    EXPECT_THROW(meaning::record_json("name[A"), std::invalid_argument);
    EXPECT_EQ(meaning::data_to_text_prompt("{}"), "Data: {}\nText:\n");
    EXPECT_EQ(meaning::text_to_data_prompt("A pub."), "Text: A pub.\nData:\n");
}

TEST_F(MdlmCheckpointTraining, WritesItsTrainingTextsAndRefusesWordVocabularies) {
    const fs::path texts = dir_.path() / "texts.jsonl";
    EXPECT_EQ(train::write_training_texts(parse(config(5)), texts), 90);
    const auto lines = read_lines(texts);
    const json first = json::parse(lines.at(0)), second = json::parse(lines.at(1)), third = json::parse(lines.at(2));
    const auto records = test::micro_records();
    const std::string record = meaning::record_json(records[0].mr);
    EXPECT_EQ(first, (json{{"prompt", "Data: " + record + "\nText:\n"}, {"answer", records[0].ref}}));
    EXPECT_EQ(second, (json{{"prompt", "Text: " + records[0].ref + "\nData:\n"}, {"answer", record}}));
    EXPECT_EQ(third, (json{{"prompt", ""}, {"answer", records[0].ref}}));

    json words = config(5);
    words["tokenizer"] = {{"min_count", 1}};
    try {
        parse(words);
        ADD_FAILURE() << "accepted";
    } catch (const ConfigError& e) {
        std::string all;
        for (const auto& issue : e.issues()) all += issue.pointer + ": " + issue.message + "\n";
        EXPECT_NE(all.find("/tokenizer/min_count: the mdlm kind takes a BPE tokenizer.json"), std::string::npos) << all;
        EXPECT_NE(all.find("/tokenizer/file: required for the mdlm kind"), std::string::npos) << all;
    }
    json teacher = test::micro_teacher_config(dir_.path());
    teacher["tokenizer"]["file"] = "tokenizer.json";
    EXPECT_THROW(parse(teacher), ConfigError);
    EXPECT_THROW(train::write_training_texts(parse(test::micro_teacher_config(dir_.path())), texts),
                 std::runtime_error);
}

}  // namespace
}  // namespace rudder
