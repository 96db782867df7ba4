// The trainer on a micro teacher (dim 16, one layer, 30 texts): it learns, it is deterministic, a resumed run
// equals an uninterrupted one, config errors name their key; and the teacher's perplexity behind `rudder score`.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include <rudder/nn/safetensors.hpp>
#include <rudder/nn/teacher_model.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/text/meaning.hpp>
#include <rudder/text/text_files.hpp>
#include <rudder/text/tokenizer.hpp>
#include <rudder/train/trainer.hpp>

#include "batches.hpp"
#include "data.hpp"
#include "train_support.hpp"

namespace rudder {
namespace {

using json = nlohmann::json;
using test::ScratchDir;

class MicroTraining : public ::testing::Test {
protected:
    void SetUp() override { test::write_micro_csv(dir_.path() / "train.csv", test::micro_records()); }

    json config(int64_t steps = 60) const { return test::micro_teacher_config(dir_.path(), steps); }
    train::TrainConfig parse(const json& j) const { return train::parse_train_config(j, dir_.path()); }
    train::TrainResult run(const json& j, int64_t stop_after = 0) const {
        train::TrainOptions options;
        options.stop_after = stop_after;
        return train::train(parse(j), options);
    }
    std::vector<json> log_of(const std::filesystem::path& model) const {
        std::vector<json> entries;
        for (const auto& line : read_lines(model / "train_log.jsonl"))
            if (!line.empty()) entries.push_back(json::parse(line));
        return entries;
    }

    ScratchDir dir_;
};

void expect_same_weights(const std::filesystem::path& a, const std::filesystem::path& b, bool same = true) {
    const SafeTensors x = load_safetensors(a), y = load_safetensors(b);
    ASSERT_EQ(x.tensors.size(), y.tensors.size());
    bool all_equal = true;
    for (size_t i = 0; i < x.tensors.size(); ++i) {
        ASSERT_EQ(x.tensors[i].first, y.tensors[i].first);
        all_equal = all_equal && at::equal(x.tensors[i].second, y.tensors[i].second);
    }
    EXPECT_EQ(all_equal, same) << a << " vs " << b;
}

// The issues of the ConfigError that `fn` throws, as "pointer: message" lines.
template <typename Fn>
std::string config_issues(Fn fn) {
    try {
        fn();
    } catch (const ConfigError& e) {
        std::string text;
        for (const auto& issue : e.issues()) text += issue.pointer + ": " + issue.message + "\n";
        return text;
    }
    return "(no ConfigError)";
}

TEST_F(MicroTraining, TeacherLossDecreasesAndTheModelDirectoryIsComplete) {
    const auto result = run(config(80));
    EXPECT_TRUE(result.finished);
    EXPECT_EQ(result.step, 80);
    EXPECT_EQ(result.texts, 30);
    EXPECT_EQ(result.dropped_too_long, 0);

    const auto model = dir_.path() / "model";
    const auto log = log_of(model);
    ASSERT_EQ(log.size(), 8u);  // every 10 steps
    const double first = log.front()["loss"], last = log.back()["loss"];
    EXPECT_LT(last, 0.5 * first) << "loss went from " << first << " to " << last;
    EXPECT_EQ(log.back()["step"], 80);
    EXPECT_TRUE(log.back()["dev_loss"].is_null());
    EXPECT_GT(log.back()["seconds"].get<double>(), 0.0);

    std::ifstream in(model / "config.json");
    const json cfg = json::parse(in);
    EXPECT_EQ(cfg["format_version"], 1);
    EXPECT_EQ(cfg["type"], "teacher");
    EXPECT_EQ(cfg["families"], json::array());
    EXPECT_EQ(cfg["tokenizer"], (json{{"type", "word"}, {"vocab", "vocab.txt"}}));
    EXPECT_EQ(cfg["weights"], "model.safetensors");
    EXPECT_EQ(cfg["network"]["dim"], 16);
    EXPECT_EQ(cfg["network"]["max_length"], 16);
    EXPECT_EQ(cfg["network"]["vocab_size"], result.vocab_size);
    // The vocabulary holds the meaning representations' words too ("name", "[").
    const auto vocab = WordTokenizer::load((model / "vocab.txt").string());
    EXPECT_EQ(vocab.vocab_size(), result.vocab_size);
    EXPECT_NE(vocab.encode("name [ Aromi ]")[0], vocab.unk_id());
    EXPECT_NE(vocab.encode("name [ Aromi ]")[1], vocab.unk_id());
    EXPECT_FALSE(std::filesystem::exists(model / "checkpoint")) << "a finished run removes its checkpoint";
    EXPECT_EQ(load_safetensors(model / "model.safetensors").metadata.at("rudder_kind"), "teacher");
}

TEST_F(MicroTraining, AFinishedRunRemovesOnlyTheCheckpointFilesItWrote) {
    json c = config(20);
    c["training"]["checkpoint_every"] = 5;
    const auto checkpoint = dir_.path() / "model" / "checkpoint";
    std::filesystem::create_directories(checkpoint);
    std::ofstream(checkpoint / "notes.txt") << "a user's file\n";
    run(c, 12);  // stopped: the checkpoint holds the trainer's files beside the user's
    ASSERT_TRUE(std::filesystem::exists(checkpoint / "state.json"));
    EXPECT_TRUE(run(c).finished);
    EXPECT_TRUE(std::filesystem::exists(checkpoint / "notes.txt")) << "the trainer removed a file it did not write";
    EXPECT_FALSE(std::filesystem::exists(checkpoint / "state.json"));
    EXPECT_FALSE(std::filesystem::exists(checkpoint / "vocab.txt"));
    for (const auto& entry : std::filesystem::directory_iterator(checkpoint))
        EXPECT_EQ(entry.path().filename(), "notes.txt") << "left behind: " << entry.path();
}

TEST_F(MicroTraining, SameSeedSameWeightsOtherSeedOtherWeights) {
    json a = config(20), b = config(20), c = config(20);
    b["out"] = (dir_.path() / "model_b").string();
    c["out"] = (dir_.path() / "model_c").string();
    c["training"]["seed"] = 8;
    run(a);
    run(b);
    run(c);
    expect_same_weights(dir_.path() / "model/model.safetensors", dir_.path() / "model_b/model.safetensors");
    expect_same_weights(dir_.path() / "model/model.safetensors", dir_.path() / "model_c/model.safetensors", false);
}

TEST_F(MicroTraining, ResumedRunEqualsUninterruptedRun) {
    json whole = config(30), parts = config(30);
    whole["out"] = (dir_.path() / "whole").string();
    parts["out"] = (dir_.path() / "parts").string();
    // 30 texts in batches of 8: epochs end inside batches. Checkpoints at 5 and 10, then the stop at 13.
    parts["training"]["checkpoint_every"] = 5;
    run(whole);

    const auto stopped = run(parts, 13);
    EXPECT_FALSE(stopped.finished);
    EXPECT_EQ(stopped.step, 13);
    const auto checkpoint = dir_.path() / "parts/checkpoint";
    std::ifstream state_in(checkpoint / "state.json");
    const json state = json::parse(state_in);
    EXPECT_EQ(state["step"], 13);
    EXPECT_EQ(state["data_position"], 13 * 8);
    EXPECT_TRUE(std::filesystem::exists(checkpoint / state["weights"].get<std::string>()));
    EXPECT_FALSE(std::filesystem::exists(checkpoint / "checkpoint-000000010.safetensors"))
        << "older weights are removed";
    EXPECT_FALSE(std::filesystem::exists(dir_.path() / "parts/config.json"));

    const auto resumed = run(parts);
    EXPECT_TRUE(resumed.finished);
    EXPECT_EQ(resumed.resumed_from, 13);
    expect_same_weights(dir_.path() / "whole/model.safetensors", dir_.path() / "parts/model.safetensors");
    // The log has each step once, as the uninterrupted run's does.
    std::vector<int64_t> steps;
    for (const auto& entry : log_of(dir_.path() / "parts")) steps.push_back(entry["step"]);
    EXPECT_EQ(steps, (std::vector<int64_t>{10, 13, 20, 30}));
}

TEST_F(MicroTraining, InitFromContinuesFromTheWeightsOfATrainedModel) {
    run(config(80));
    const auto first = dir_.path() / "model";

    json fresh = config(1), continued = config(1);
    fresh["training"]["log_every"] = 1;
    fresh["training"]["warmup"] = 0;
    continued["training"]["warmup"] = 0;
    fresh["out"] = (dir_.path() / "fresh").string();
    continued["training"]["log_every"] = 1;
    continued["training"]["init_from"] = first.string();
    continued["tokenizer"] = json::object();  // the vocabulary comes with the model
    continued["out"] = (dir_.path() / "continued").string();
    run(fresh);
    run(continued);
    const double fresh_loss = log_of(dir_.path() / "fresh").front()["loss"];
    const double continued_loss = log_of(dir_.path() / "continued").front()["loss"];
    const double trained_loss = log_of(first).back()["loss"];
    EXPECT_LT(continued_loss, 0.6 * fresh_loss) << "the first step does not start from the trained weights";
    EXPECT_NEAR(continued_loss, trained_loss, 0.25 * trained_loss);

    std::ifstream in(dir_.path() / "continued/config.json");
    const json cfg = json::parse(in);
    EXPECT_EQ(cfg["training"]["init_from"], (json{{"model", first.string()}, {"steps", 80}}));
    EXPECT_EQ(read_lines(dir_.path() / "continued/vocab.txt"), read_lines(first / "vocab.txt"));
    // A third stage counts every step behind its weights.
    json third = continued;
    third["training"]["init_from"] = (dir_.path() / "continued").string();
    third["out"] = (dir_.path() / "third").string();
    run(third);
    std::ifstream third_in(dir_.path() / "third/config.json");
    EXPECT_EQ(json::parse(third_in)["training"]["init_from"]["steps"], 81);

    // Another kind, a folder without a model, and a vocabulary setting that init_from decides.
    json other_kind = continued;
    other_kind["kind"] = "discrete";
    other_kind["network"] = {{"dim", 16}, {"layers", 1}, {"heads", 2}, {"ff_dim", 32}};
    other_kind["out"] = (dir_.path() / "other_kind").string();
    try {
        run(other_kind);
        FAIL() << "expected ModelError";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("holds a teacher model; this config trains a discrete"), std::string::npos)
            << e.what();
    }
    json no_model = continued;
    no_model["training"]["init_from"] = dir_.path().string();
    no_model["tokenizer"] = {{"min_count", 2}};
    const std::string issues = config_issues([&] { parse(no_model); });
    EXPECT_NE(issues.find("/training/init_from: '" + dir_.path().string() + "' is not a trained model directory"),
              std::string::npos)
        << issues;
    json min_count = continued;
    min_count["tokenizer"] = {{"min_count", 2}};
    EXPECT_NE(config_issues([&] {
                  parse(min_count);
              }).find("/tokenizer/min_count: the vocabulary comes from training.init_from"),
              std::string::npos);
}

TEST_F(MicroTraining, InitFromADenoiserWithFewerLayersGrowsItWithIdentityBlocks) {
    json trained = config(40);
    trained["kind"] = "discrete";
    trained["network"] = {{"dim", 16}, {"layers", 1}, {"heads", 2}, {"ff_dim", 32}};
    trained["max_condition_length"] = 24;
    trained["data"]["dev"] = trained["data"]["train"];
    trained["out"] = (dir_.path() / "one_layer").string();
    const auto first = run(trained);
    ASSERT_TRUE(first.dev_loss.has_value());

    // One step at a learning rate too small to move the weights: the grown network's dev loss (the same noise,
    // drawn from the same seed) is the trained one's, so the new block computes the identity.
    json grown = trained;
    grown["network"]["layers"] = 3;
    grown["tokenizer"] = json::object();
    grown["training"].update({{"steps", 1}, {"warmup", 0}, {"lr", 1e-9}, {"init_from", trained["out"]}});
    grown["out"] = (dir_.path() / "three_layers").string();
    const auto second = run(grown);
    ASSERT_TRUE(second.dev_loss.has_value());
    EXPECT_NEAR(*second.dev_loss, *first.dev_loss, 1e-4 * *first.dev_loss);

    const SafeTensors held = load_safetensors(dir_.path() / "one_layer/model.safetensors");
    const SafeTensors now = load_safetensors(dir_.path() / "three_layers/model.safetensors");
    EXPECT_TRUE(at::allclose(*now.find("trunk.blocks.0.qkv.weight"), *held.find("trunk.blocks.0.qkv.weight"), 0, 1e-6));
    for (const std::string block : {"trunk.blocks.1.", "trunk.blocks.2."}) {
        // The residual outputs start at zero; the rest of the new block is initialised as usual.
        for (const std::string zero : {"proj.weight", "proj.bias", "ff2.weight", "ff2.bias"})
            EXPECT_LT(now.find(block + zero)->abs().max().item<double>(), 1e-6) << block + zero;
        EXPECT_GT(now.find(block + "qkv.weight")->std().item<double>(), 0.01) << block;
        EXPECT_EQ(now.find(block + "norm1.weight")->min().item<double>(), 1.0) << block;
    }
    std::ifstream in(dir_.path() / "three_layers/config.json");
    const json cfg = json::parse(in);
    EXPECT_EQ(cfg["training"]["init_from"]["layers"], 1);
    EXPECT_EQ(cfg["network"]["layers"], 3);

    // Fewer layers than the trained model, or another width, is still refused by name.
    for (const auto& [key, value] : std::vector<std::pair<std::string, int>>{{"dim", 32}}) {
        json other = grown;
        other["network"][key] = value;
        other["out"] = (dir_.path() / "other").string();
        EXPECT_THROW(run(other), SafeTensorsError) << key;
    }
    json shallower = grown;
    shallower["training"]["init_from"] = grown["out"];
    shallower["network"]["layers"] = 2;
    shallower["out"] = (dir_.path() / "shallower").string();
    try {
        run(shallower);
        FAIL() << "expected SafeTensorsError";
    } catch (const SafeTensorsError& e) {
        EXPECT_NE(std::string(e.what()).find("unexpected tensor 'trunk.blocks.2."), std::string::npos) << e.what();
    }
}

TEST_F(MicroTraining, EmaWritesTheMovingAverageOfTheWeightsAndResumesIt) {
    run(config(30));
    const auto trained = dir_.path() / "model";
    // Two steps from known weights w0: the run without an average writes w2; with decay d, the average is
    // d^2 w0 + d (1 - d) w1 + (1 - d) w2, where w1 is the weights after the first step (a run stopped there).
    json plain = config(2);
    plain["tokenizer"] = json::object();
    plain["training"].update({{"warmup", 0}, {"init_from", trained.string()}});
    plain["out"] = (dir_.path() / "plain").string();
    run(plain);
    json one_step = plain;
    one_step["out"] = (dir_.path() / "one_step").string();
    run(one_step, /*stop_after=*/1);  // the same schedule as the two-step runs
    json averaged = plain;
    const double d = 0.75;
    averaged["training"]["ema"] = d;
    averaged["out"] = (dir_.path() / "averaged").string();
    run(averaged);

    const SafeTensors w0 = load_safetensors(trained / "model.safetensors");
    const SafeTensors w1 = load_safetensors(dir_.path() / "one_step/checkpoint/checkpoint-000000001.safetensors");
    const SafeTensors w2 = load_safetensors(dir_.path() / "plain/model.safetensors");
    const SafeTensors average = load_safetensors(dir_.path() / "averaged/model.safetensors");
    ASSERT_EQ(average.tensors.size(), w2.tensors.size());
    int moved = 0;
    for (const auto& [name, got] : average.tensors) {
        const at::Tensor want =
            *w0.find(name) * (d * d) + *w1.find("network." + name) * (d * (1 - d)) + *w2.find(name) * (1 - d);
        EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-7)) << name;
        moved += !at::allclose(*w2.find(name), want, 1e-5, 1e-7);
    }
    EXPECT_GT(moved, 0) << "the average equals the last weights: the test cannot tell them apart";
    std::ifstream in(dir_.path() / "averaged/config.json");
    EXPECT_EQ(json::parse(in)["training"]["ema"], d);

    // A run stopped and resumed keeps its average: the same model as the uninterrupted one.
    json longer = config(12);
    longer["training"]["ema"] = 0.9;
    longer["out"] = (dir_.path() / "whole").string();
    run(longer);
    longer["out"] = (dir_.path() / "parts").string();
    run(longer, 5);
    run(longer);
    expect_same_weights(dir_.path() / "whole/model.safetensors", dir_.path() / "parts/model.safetensors");

    json bad = config(2);
    bad["training"]["ema"] = 1;
    EXPECT_NE(config_issues([&] { parse(bad); }).find("/training/ema: expected a number in [0, 0.999999], got 1"),
              std::string::npos);
}

TEST_F(MicroTraining, Bfloat16PrecisionLearnsAsFloat32DoesDeterministically) {
    for (const std::string kind : {"teacher", "discrete", "continuous"}) {
        SCOPED_TRACE(kind);
        json base = config(60);
        base["kind"] = kind;
        if (kind != "teacher") base["network"] = {{"dim", 16}, {"layers", 1}, {"heads", 2}, {"ff_dim", 32}};
        if (kind == "continuous") base["network"]["embed_dim"] = 8;
        base["data"]["dev"] = base["data"]["train"];
        std::map<std::string, train::TrainResult> results;
        for (const std::string precision : {"float32", "bfloat16", "bfloat16 again"}) {
            json j = base;
            j["training"]["precision"] = precision.substr(0, 8);
            j["out"] = (dir_.path() / (kind + " " + precision)).string();
            results[precision] = run(j);
        }
        const auto& full = results["float32"];
        const auto& half = results["bfloat16"];
        const double first = log_of(dir_.path() / (kind + " bfloat16")).front()["loss"];
        EXPECT_LT(half.last_loss, 0.8 * first) << "bfloat16 training does not learn";
        ASSERT_TRUE(full.dev_loss && half.dev_loss);
        EXPECT_NEAR(*half.dev_loss, *full.dev_loss, 0.05 * *full.dev_loss);
        // The products really ran in bfloat16 (the weights differ from float32's), the same way each time.
        expect_same_weights(dir_.path() / (kind + " float32/model.safetensors"),
                            dir_.path() / (kind + " bfloat16/model.safetensors"), /*same=*/false);
        expect_same_weights(dir_.path() / (kind + " bfloat16/model.safetensors"),
                            dir_.path() / (kind + " bfloat16 again/model.safetensors"));
        std::ifstream in(dir_.path() / (kind + " bfloat16/config.json"));
        EXPECT_EQ(json::parse(in)["training"]["precision"], "bfloat16");
    }
    json bad = config(2);
    bad["training"]["precision"] = "float16";
    EXPECT_NE(config_issues([&] { parse(bad); }).find("/training/precision: expected one of \"float32\", \"bfloat16\""),
              std::string::npos);
}

TEST_F(MicroTraining, ACdcdNetworkStartsFromADiffusionLmOneWithItsRoundingAsTheHead) {
    json trained = config(40);
    trained["kind"] = "continuous";
    trained["network"] = {{"dim", 16}, {"layers", 1}, {"heads", 2}, {"ff_dim", 32}, {"embed_dim", 8}};
    trained["out"] = (dir_.path() / "diffusion_lm").string();
    run(trained);

    json cdcd = trained;
    cdcd["network"].update(
        {{"objective", "cdcd"},
         {"self_conditioning", true},
         {"schedule", {{"name", "cdcd"}, {"T", 100}, {"sigma_min", 0.1}, {"sigma_max", 20.0}, {"warp_bins", 10}}}});
    cdcd["tokenizer"] = json::object();
    cdcd["training"].update({{"steps", 1}, {"warmup", 0}, {"lr", 1e-9}, {"init_from", trained["out"]}});
    cdcd["out"] = (dir_.path() / "cdcd").string();
    run(cdcd);

    const SafeTensors held = load_safetensors(dir_.path() / "diffusion_lm/model.safetensors");
    const SafeTensors now = load_safetensors(dir_.path() / "cdcd/model.safetensors");
    for (const std::string shared : {"embedding", "input_proj.weight", "time_mlp2.bias", "trunk.blocks.0.ff1.weight"})
        EXPECT_TRUE(at::allclose(*now.find(shared), *held.find(shared), 0, 1e-6)) << shared;
    const at::Tensor& table = *held.find("embedding");
    EXPECT_TRUE(
        at::allclose(*now.find("head.weight"), at::matmul(table, *held.find("output_proj.weight")), 1e-4, 1e-5));
    EXPECT_TRUE(at::allclose(*now.find("head.bias"), at::matmul(table, *held.find("output_proj.bias")), 1e-4, 1e-5));
    EXPECT_LT(now.find("self_condition_proj.weight")->abs().max().item<double>(), 1e-6);
    EXPECT_EQ(now.find("output_proj.weight"), nullptr);
    std::ifstream in(dir_.path() / "cdcd/config.json");
    const json cfg = json::parse(in);
    EXPECT_EQ(cfg["training"]["init_from"]["objective"], "diffusion_lm");
    EXPECT_EQ(cfg["network"]["objective"], "cdcd");

    // Not the other way, nor across objectives and depths at once.
    json back = trained;
    back["tokenizer"] = json::object();
    back["training"]["init_from"] = cdcd["out"];
    back["out"] = (dir_.path() / "back").string();
    json deeper = cdcd;
    deeper["network"]["layers"] = 2;
    deeper["out"] = (dir_.path() / "deeper").string();
    for (const json& refused : {back, deeper}) {
        try {
            run(refused);
            ADD_FAILURE() << "expected ModelError for " << refused["out"];
        } catch (const ModelError& e) {
            EXPECT_NE(std::string(e.what()).find("a cdcd network can start from a diffusion_lm one of its sizes"),
                      std::string::npos)
                << e.what();
        }
    }
}

TEST_F(MicroTraining, ASnapshotWritesTheModelOfTheCheckpointAndLeavesTheRunAsItWas) {
    json trained = config(20);
    trained["kind"] = "discrete";
    trained["network"] = {{"dim", 16}, {"layers", 1}, {"heads", 2}, {"ff_dim", 32}};
    trained["max_condition_length"] = 24;
    trained["out"] = (dir_.path() / "one_layer").string();
    run(trained);

    // A grown run with a moving average, stopped at step 6: its snapshot is the average at step 6, and records
    // what the finished model would (the depth it grew from, although the run resumes without reading init_from).
    json grown = trained;
    grown["network"]["layers"] = 2;
    grown["tokenizer"] = json::object();
    grown["training"].update({{"steps", 10}, {"ema", 0.5}, {"init_from", trained["out"]}});
    grown["out"] = (dir_.path() / "grown").string();
    run(grown, 6);
    const auto log_before = read_lines(dir_.path() / "grown/train_log.jsonl");
    train::TrainOptions options;
    options.snapshot = dir_.path() / "snapshot";
    const train::TrainResult snapshot = train::train(parse(grown), options);
    EXPECT_FALSE(snapshot.finished);
    EXPECT_EQ(snapshot.step, 6);
    EXPECT_EQ(read_lines(dir_.path() / "grown/train_log.jsonl"), log_before);
    const auto checkpoint = dir_.path() / "grown/checkpoint/checkpoint-000000006.safetensors";
    ASSERT_TRUE(std::filesystem::exists(checkpoint));
    const SafeTensors saved = load_safetensors(checkpoint);
    const SafeTensors written = load_safetensors(dir_.path() / "snapshot/model.safetensors");
    for (const auto& [name, tensor] : written.tensors)
        EXPECT_TRUE(at::equal(tensor, *saved.find("ema." + name))) << name;
    std::ifstream in(dir_.path() / "snapshot/config.json");
    const json cfg = json::parse(in);
    EXPECT_EQ(cfg["training"]["steps"], 6);
    EXPECT_EQ(cfg["training"]["init_from"]["layers"], 1);
    EXPECT_EQ(cfg["training"]["snapshot_of"], grown["out"]);
    EXPECT_EQ(cfg["network"]["layers"], 2);
    EXPECT_FALSE(cfg["training"].contains("snapshot_weights"));

    // The raw weights instead of their average, when asked, and said so.
    train::TrainOptions raw = options;
    raw.snapshot = dir_.path() / "snapshot-raw";
    raw.snapshot_raw_weights = true;
    EXPECT_EQ(train::train(parse(grown), raw).step, 6);
    const SafeTensors raw_written = load_safetensors(dir_.path() / "snapshot-raw/model.safetensors");
    int64_t differ_from_average = 0;
    for (const auto& [name, tensor] : raw_written.tensors) {
        const at::Tensor* weights = saved.find("network." + name);
        ASSERT_NE(weights, nullptr) << name;
        EXPECT_TRUE(at::equal(tensor, *weights)) << name;
        const at::Tensor* average = saved.find("ema." + name);
        if (average != nullptr && !at::equal(tensor, *average)) ++differ_from_average;
    }
    EXPECT_GT(differ_from_average, 0) << "the raw weights are the average";
    std::ifstream raw_in(dir_.path() / "snapshot-raw/config.json");
    EXPECT_EQ(json::parse(raw_in)["training"]["snapshot_weights"],
              "raw: the weights at this step, not their moving average");
    // ... which a run without an average has not.
    raw.snapshot = dir_.path() / "snapshot-of-one-layer";
    EXPECT_THROW(train::train(parse(trained), raw), ConfigError);

    // The run then finishes as it would have, and records the depth too.
    EXPECT_TRUE(run(grown).finished);
    std::ifstream finished_in(dir_.path() / "grown/config.json");
    EXPECT_EQ(json::parse(finished_in)["training"]["init_from"]["layers"], 1);
    // With no checkpoint there is nothing to write.
    EXPECT_THROW(train::train(parse(grown), options), ModelError);
}

TEST_F(MicroTraining, AConfigFileWithANumberBeyondDoublesRangeIsAConfigError) {
    const auto file = dir_.path() / "overflow.json";
    std::ofstream(file) << R"({"kind": "teacher", "training": {"lr": 1e999}})";
    const std::string issues = config_issues([&] { train::load_train_config(file); });
    EXPECT_NE(issues.find(": not valid JSON: "), std::string::npos) << issues;
    EXPECT_NE(issues.find("number overflow"), std::string::npos) << issues;
}

TEST_F(MicroTraining, RefusesACheckpointWrittenWithAnotherConfig) {
    json j = config(30);
    run(j, 10);
    j["training"]["lr"] = 0.02;
    j["training"]["threads"] = 2;  // does not change the result: allowed
    try {
        run(j);
        FAIL() << "expected ModelError";
    } catch (const ModelError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("/training/lr: 0.01 in the checkpoint, 0.02 in the config"), std::string::npos) << what;
        EXPECT_EQ(what.find("threads"), std::string::npos) << what;
    }
}

TEST_F(MicroTraining, ResumesWhenTheConfigReachesItsInitFromFolderAnotherWay) {
    run(config(5));
    json other = config(5);
    other["out"] = (dir_.path() / "other").string();
    run(other);
    json j = config(20);
    j["training"]["init_from"] = "model";  // relative to the config's folder
    j["tokenizer"] = json::object();
    j["out"] = (dir_.path() / "continued").string();
    run(j, 10);
    // Another folder is another run.
    j["training"]["init_from"] = "other";
    try {
        run(j);
        FAIL() << "expected ModelError";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("/training/init_from: "), std::string::npos) << e.what();
    }
    // A copy of the config one folder down names the first folder as "../model": the run goes on from step 10.
    std::filesystem::create_directories(dir_.path() / "copy");
    j["training"]["init_from"] = "../model";
    EXPECT_TRUE(train::train(train::parse_train_config(j, dir_.path() / "copy"), {}).finished);
    std::vector<int64_t> steps;
    for (const auto& entry : log_of(dir_.path() / "continued")) steps.push_back(entry["step"]);
    EXPECT_EQ(steps, (std::vector<int64_t>{10, 20}));
}

TEST_F(MicroTraining, RefusesToOverwriteAFinishedModelUnlessAsked) {
    const json j = config(5);
    run(j);
    try {
        run(j);
        FAIL() << "expected ModelError";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("already holds a trained model"), std::string::npos) << e.what();
    }
    train::TrainOptions options;
    options.overwrite = true;
    EXPECT_TRUE(train::train(parse(j), options).finished);
}

TEST_F(MicroTraining, DevLossIsLoggedAndLongTextsAreDropped) {
    auto records = test::micro_records();
    records.push_back(
        {"name[Long]", "This text is far too long for a maximum length of sixteen tokens , so it goes ."});
    test::write_micro_csv(dir_.path() / "train.csv", records);
    test::write_micro_csv(dir_.path() / "dev.csv", {records.begin(), records.begin() + 10});
    json j = config(20);
    j["data"]["dev"] = "dev.csv";  // relative to the config's folder
    j["data"]["dev_every"] = 10;
    const auto result = run(j);
    EXPECT_EQ(result.texts, 30);
    EXPECT_EQ(result.dropped_too_long, 1);
    ASSERT_TRUE(result.dev_loss);
    EXPECT_TRUE(std::isfinite(*result.dev_loss));
    const auto log = log_of(dir_.path() / "model");
    ASSERT_EQ(log.size(), 2u);
    EXPECT_FALSE(log[0]["dev_loss"].is_null());
    EXPECT_LT(log[1]["dev_loss"].get<double>(), log[0]["dev_loss"].get<double>());
}

TEST_F(MicroTraining, ConfigErrorsNameTheKeyAndWhatWasExpected) {
    json j = config();
    j["kind"] = "teachr";
    j["training"]["lr"] = -1;
    j["training"]["stepz"] = 3;
    j["training"].erase("steps");
    j["data"]["train"] = "missing.csv";
    j["tokenizer"]["vocab"] = (dir_.path() / "train.csv").string();
    j["max_length"] = "long";
    const std::string issues = config_issues([&] { parse(j); });
    for (const char* expected : {
             "/kind: expected one of \"teacher\", \"continuous\", \"discrete\", \"mdlm\", \"tagger\", \"parser\", "
             "\"syntax_classifier\", \"attribute_classifier\", got \"teachr\"; "
             "did you mean \"teacher\"?",
             "/training/lr: expected a number > 0 and <= 1, got -1",
             "/training/steps: missing; expected an integer in [1, 100000000]",
             "/training/stepz: unknown key 'stepz'; did you mean 'steps'?",
             "/data/train: no such file '",
             "/tokenizer/min_count: applies only when the vocabulary is built",
             "/max_length: expected an integer in [1, 4096], got \"long\"",
         })
        EXPECT_NE(issues.find(expected), std::string::npos) << issues << "\nlacks: " << expected;

    json teacher = config();
    teacher["training"]["condition_dropout"] = 0.1;
    teacher["network"]["max_length"] = 8;
    const std::string more = config_issues([&] { parse(teacher); });
    EXPECT_NE(more.find("/training/condition_dropout: applies to the denoiser kinds"), std::string::npos) << more;
    EXPECT_NE(more.find("/network/max_length: must equal the top-level max_length (16) or be left out"),
              std::string::npos)
        << more;

    // The network's own keys are checked when it is built, and reported under /network.
    json network = config();
    network["network"]["heads"] = 3;
    network["network"]["dimm"] = 3;
    const std::string from_network = config_issues([&] { run(network); });
    EXPECT_NE(from_network.find("/network/heads: dim (16) must be a multiple of heads (3)"), std::string::npos)
        << from_network;
    EXPECT_NE(from_network.find("/network/dimm: unknown key 'dimm'; did you mean 'dim'?"), std::string::npos)
        << from_network;

    const auto file = dir_.path() / "broken.json";
    std::ofstream(file) << "{\"kind\": \"teacher\",\n  \"data\": }";
    const std::string broken = config_issues([&] { train::load_train_config(file); });
    EXPECT_NE(broken.find(": not valid JSON: "), std::string::npos) << broken;
}

TEST_F(MicroTraining, ScoreGivesFinitePerplexityLowerOnTrainingTextsThanShuffledOnes) {
    run(config(120));
    const TeacherModel teacher = load_teacher(dir_.path() / "model");
    std::vector<std::string> texts, shuffled;
    for (const auto& r : test::micro_records()) {
        texts.push_back(r.ref);
        // The same words in another order: reversed.
        auto words = WordTokenizer::split(r.ref);
        std::reverse(words.begin(), words.end());
        std::string line;
        for (const auto& w : words) line += (line.empty() ? "" : " ") + w;
        shuffled.push_back(line);
    }
    const auto on_train = score_texts(teacher, texts);
    const auto on_shuffled = score_texts(teacher, shuffled);
    EXPECT_EQ(on_train.texts, 30);
    EXPECT_EQ(on_train.unknown_tokens, 0);
    int64_t tokens = 0;
    for (const auto& t : texts) tokens += static_cast<int64_t>(WordTokenizer::split(t).size()) + 1;
    EXPECT_EQ(on_train.tokens, tokens) << "every token plus one end token per text";
    EXPECT_TRUE(std::isfinite(on_train.perplexity()));
    EXPECT_GT(on_train.perplexity(), 1.0);
    EXPECT_LT(on_train.perplexity() * 3, on_shuffled.perplexity())
        << on_train.perplexity() << " vs " << on_shuffled.perplexity();

    // Batching does not change the result; unknown words are counted; texts too long are skipped and counted.
    EXPECT_NEAR(score_texts(teacher, texts, 7).nll, on_train.nll, 1e-6 * on_train.nll);
    const auto odd = score_texts(teacher, {"Xyzzy serves Plugh food .", "",
                                           std::string(40, 'a') + " b c d e f g h "
                                                                  "i j k l m n o p q r"});
    EXPECT_EQ(odd.texts, 2);
    EXPECT_EQ(odd.unknown_tokens, 2);
    EXPECT_EQ(odd.skipped_too_long, 1);
    EXPECT_EQ(odd.tokens, 6 + 1);  // five tokens and an end token, then an empty text's end token
}

TEST_F(MicroTraining, TeacherLoaderRefusesOtherModels) {
    write_corpus_model({"The Eagle is a pub ."}, dir_.path() / "corpus");
    try {
        load_teacher(dir_.path() / "corpus");
        FAIL() << "expected ModelError";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("is a 'corpus' model, not a teacher language model"), std::string::npos)
            << e.what();
    }
    run(config(5));
    std::filesystem::remove(dir_.path() / "model/model.safetensors");
    try {
        load_teacher(dir_.path() / "model");
        FAIL() << "expected ModelError";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
    }
}

TEST_F(MicroTraining, DenoiserKindsTrainDeterministicallyIntoTransformerModels) {
    for (const std::string kind : {"continuous", "discrete"}) {
        SCOPED_TRACE(kind);
        json j = config(12);
        j["kind"] = kind;
        j["network"] = {{"dim", 16}, {"layers", 1}, {"heads", 2}, {"ff_dim", 32}};
        if (kind == "continuous") j["network"]["embed_dim"] = 8;
        j["training"]["condition_dropout"] = 0.25;
        j["max_condition_length"] = 24;
        j["out"] = (dir_.path() / (kind + "_a")).string();
        const auto result = run(j);
        EXPECT_TRUE(result.finished);
        EXPECT_TRUE(std::isfinite(result.last_loss));
        j["out"] = (dir_.path() / (kind + "_b")).string();
        run(j);
        expect_same_weights(dir_.path() / (kind + "_a/model.safetensors"),
                            dir_.path() / (kind + "_b/model.safetensors"));

        std::ifstream in(dir_.path() / (kind + "_a/config.json"));
        const json cfg = json::parse(in);
        EXPECT_EQ(cfg["type"], "transformer");
        EXPECT_EQ(cfg["families"], json::array({kind}));
        EXPECT_EQ(cfg["network"]["family"], kind);
        EXPECT_EQ(cfg["network"]["max_length"], 16);
        EXPECT_EQ(cfg["network"]["max_condition_length"], 24);
        EXPECT_EQ(cfg["network"]["condition_dropout"], 0.25);
        const char* schedule = kind == "continuous" ? "schedule" : "mask_schedule";
        ASSERT_TRUE(cfg.contains(schedule));
        EXPECT_EQ(cfg[schedule], cfg["network"][schedule]);
    }
}

TEST_F(MicroTraining, FieldDropoutTrainsOnSomeOfEachConditionsFieldsAndDevKeepsThemWhole) {
    json j = config();
    j["kind"] = "discrete";
    j["network"] = {{"dim", 16}, {"layers", 1}, {"heads", 2}, {"ff_dim", 32}};
    j["max_condition_length"] = 24;
    j["training"]["field_dropout"] = 0.5;
    const train::TrainConfig c = parse(j);
    const train::TrainingData data = train::load_training_data(c, [](const std::string&) {});
    const auto records = test::micro_records();
    ASSERT_EQ(data.train.examples.size(), records.size());
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < static_cast<int64_t>(records.size()); ++i) rows.push_back(i);
    const auto condition_of = [&](const nn::TrainingBatch& batch, int64_t b) {
        std::vector<int64_t> ids;
        for (int64_t j = 0; j < batch.condition.size(1); ++j)
            if (const int64_t id = batch.condition[b][j].item<int64_t>(); id != data.tokenizer->pad_id())
                ids.push_back(id);
        return ids;
    };

    // Without a step's seed (dev batches) every condition is whole.
    const nn::TrainingBatch whole = train::make_batch(c, data.train.examples, rows, data.tokenizer->pad_id());
    for (size_t i = 0; i < records.size(); ++i)
        EXPECT_EQ(condition_of(whole, static_cast<int64_t>(i)), data.tokenizer->encode(records[i].mr)) << records[i].mr;

    // With one, each row's condition is a non-empty subset of its fields in order, as a controller writes them; every
    // field is trained on alone; about half the rows draw a subset, 7 in 8 of which leave a field out.
    int64_t partial = 0, total = 0;
    std::map<std::string, int> alone;
    for (uint64_t step = 1; step <= 100; ++step) {
        const nn::TrainingBatch batch = train::make_batch(c, data.train.examples, rows, data.tokenizer->pad_id(), step);
        for (size_t i = 0; i < records.size(); ++i) {
            const std::vector<int64_t> got = condition_of(batch, static_cast<int64_t>(i));
            const auto fields = meaning::parse(records[i].mr);
            bool found = false;
            for (unsigned subset = 1; subset < (1u << fields.size()) && !found; ++subset) {
                std::string text;
                for (size_t f = 0; f < fields.size(); ++f)
                    if (subset & (1u << f))
                        text += (text.empty() ? "" : ", ") + fields[f].attribute + "[" + fields[f].value + "]";
                if (data.tokenizer->encode(text) != got) continue;
                found = true;
                if (subset != (1u << fields.size()) - 1) ++partial;
                if ((subset & (subset - 1)) == 0) ++alone[text];
            }
            EXPECT_TRUE(found) << "step " << step << ", " << records[i].mr << ": "
                               << data.tokenizer->decode(got.data(), static_cast<int64_t>(got.size()));
            ++total;
        }
    }
    const double share = static_cast<double>(partial) / static_cast<double>(total);
    EXPECT_NEAR(share, 0.5 * 7 / 8, 0.04) << partial << " of " << total;
    for (const char* field : {"name[Aromi]", "food[Italian]", "area[riverside]", "area[city centre]"})
        EXPECT_GT(alone[field], 0) << field;
    // A step's draw is a function of its seed.
    EXPECT_TRUE(
        train::make_batch(c, data.train.examples, rows, data.tokenizer->pad_id(), 9)
            .condition.equal(train::make_batch(c, data.train.examples, rows, data.tokenizer->pad_id(), 9).condition));

    // A representation that is not fields is refused, naming the setting; the setting is the denoisers'.
    auto bad = records;
    bad[3].mr = "name[The Eagle";
    test::write_micro_csv(dir_.path() / "train.csv", bad);
    try {
        train::load_training_data(parse(j), [](const std::string&) {});
        FAIL() << "expected std::runtime_error";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("training.field_dropout: meaning representation 'name[The Eagle'"),
                  std::string::npos)
            << e.what();
    }
    json teacher = config();
    teacher["training"]["field_dropout"] = 0.2;
    const std::string issues = config_issues([&] { parse(teacher); });
    EXPECT_NE(issues.find("/training/field_dropout: applies to the denoiser kinds"), std::string::npos) << issues;
}

TEST(ReadTexts, JsonLinesE2ECsvOrPlainLines) {
    ScratchDir dir;
    const auto jsonl = dir.path() / "samples.jsonl";
    std::ofstream(jsonl) << "{\"index\":0,\"text\":\"The Eagle is a pub.\"}\n\n{\"text\":\"\"}\n";
    EXPECT_EQ(read_texts(jsonl), (std::vector<std::string>{"The Eagle is a pub.", ""}));
    const auto plain = dir.path() / "texts.txt";
    std::ofstream(plain) << "The Eagle is a pub.\n  \nAromi serves food.\n";
    EXPECT_EQ(read_texts(plain), (std::vector<std::string>{"The Eagle is a pub.", "Aromi serves food."}));
    const auto csv = dir.path() / "refs.csv";  // E2E CSV by name: the ref column
    std::ofstream(csv) << "mr,ref\n\"name[Aromi], food[Thai]\",\"Aromi serves Thai food, \"\"cheap\"\".\"\n";
    EXPECT_EQ(read_texts(csv), (std::vector<std::string>{"Aromi serves Thai food, \"cheap\"."}));
    const auto bad = dir.path() / "bad.jsonl";
    std::ofstream(bad) << "{\"text\":\"ok\"}\n{\"txt\":\"no\"}\n";
    try {
        read_texts(bad);
        FAIL() << "expected std::runtime_error";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("bad.jsonl:2: expected an object with a \"text\" string"),
                  std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace rudder
