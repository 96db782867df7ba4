// Micro tagger and parser trained by the trainer on a 20-sentence treebank in a second or two: the loss falls, the
// models tag and parse their training sentences exactly, the annotator projects onto Rudder's words, and the
// runtime refuses them as diffusion models.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "../train/train_support.hpp"
#include <rudder/runtime/model.hpp>
#include <rudder/syntax/annotator.hpp>
#include <rudder/text/text_files.hpp>
#include <rudder/text/treebank.hpp>
#include <rudder/train/trainer.hpp>

namespace rudder {
namespace {

using json = nlohmann::json;

// Four sentence shapes around five restaurant names.
std::vector<std::string> micro_trees() {
    const std::vector<std::string> names = {"Aromi", "Zizzi", "Cotto", "Clowns", "Fitzbillies"};
    std::vector<std::string> out;
    for (const auto& n : names) {
        out.push_back("(ROOT (S (NP (NNP " + n + ")) (VP (VBZ serves) (NP (JJ French) (NN food))) (. .)))");
        out.push_back("(ROOT (S (NP (NNP " + n + ")) (VP (VBZ is) (NP (DT a) (JJ cheap) (NN pub))) (. .)))");
        out.push_back("(ROOT (S (PP (IN In) (NP (DT the) (NN city) (NN centre))) (, ,) (NP (NNP " + n +
                      ")) (VP (VBZ serves) (NP (NN food))) (. .)))");
        out.push_back("(ROOT (NP (NP (NNP " + n +
                      ")) (, ,) (NP (DT a) (NN pub) (PP (IN near) (NP (DT the) (NN river))))))");
    }
    return out;
}

json micro_config(const std::string& kind, const std::filesystem::path& dir, int64_t steps) {
    return {{"kind", kind},
            {"data", {{"train", (dir / "train.ptb").string()}}},
            {"network",
             {{"word_dim", 16},
              {"feature_dim", 8},
              {"buckets", 512},
              {"hidden", 24},
              {"layers", 1},
              {"dropout", 0.0},
              {"word_dropout", 0.0}}},
            {"training",
             {{"steps", steps},
              {"batch_size", 8},
              {"lr", 0.02},
              {"seed", 3},
              {"threads", 1},
              {"log_every", 10},
              {"checkpoint_every", 0}}},
            {"max_length", 20},
            {"out", (dir / kind).string()}};
}

class MicroSyntax : public ::testing::Test {
protected:
    void SetUp() override {
        std::ofstream out(dir_.path() / "train.ptb");
        for (const auto& t : micro_trees()) out << t << "\n\n";
    }
    train::TrainResult train_kind(const std::string& kind, int64_t steps) {
        return train::train(train::parse_train_config(micro_config(kind, dir_.path(), steps), dir_.path()));
    }
    std::vector<json> log_of(const std::string& kind) const {
        std::vector<json> entries;
        for (const auto& line : read_lines(dir_.path() / kind / "train_log.jsonl"))
            if (!line.empty()) entries.push_back(json::parse(line));
        return entries;
    }
    test::ScratchDir dir_;
};

TEST_F(MicroSyntax, ParserLearnsItsTrainingTrees) {
    const auto result = train_kind("parser", 120);
    EXPECT_TRUE(result.finished);
    EXPECT_EQ(result.texts, 20);
    const auto log = log_of("parser");
    ASSERT_GE(log.size(), 2u);
    const double first = log.front()["loss"], last = log.back()["loss"];
    EXPECT_LT(last, 0.2 * first) << "loss went from " << first << " to " << last;

    const auto parser = syntax::ParserModel::load(dir_.path() / "parser");
    const auto sentences = syntax::read_treebank(dir_.path() / "train.ptb");
    std::vector<std::vector<std::string>> words, tags;
    for (const auto& s : sentences) {
        words.push_back(s.words);
        tags.push_back(s.xpos);
    }
    const auto trees = parser->parse(words, tags, 7);  // batches of 7: a partial last batch too
    ASSERT_EQ(trees.size(), sentences.size());
    syntax::BracketScore score;
    for (size_t i = 0; i < trees.size(); ++i) {
        score += syntax::evalb(sentences[i].tree, trees[i]);
        // The output is the tree without its ROOT.
        EXPECT_EQ("(ROOT " + syntax::to_string(trees[i]) + ")", syntax::to_string(sentences[i].tree));
    }
    EXPECT_EQ(score.exact, 20);

    std::ifstream in(dir_.path() / "parser" / "config.json");
    const json cfg = json::parse(in);
    EXPECT_EQ(cfg["type"], "parser");
    EXPECT_EQ(cfg["network"]["labels"], (json{"S", "NP", "VP", "PP"}));
}

TEST_F(MicroSyntax, TaggerLearnsAndAnnotatorProjectsOntoWords) {
    train_kind("tagger", 60);
    const auto log = log_of("tagger");
    const double first = log.front()["loss"], last = log.back()["loss"];
    EXPECT_LT(last, 0.1 * first) << "loss went from " << first << " to " << last;
    const auto tagger = syntax::TaggerModel::load(dir_.path() / "tagger");
    EXPECT_FALSE(tagger->has_upos());  // bracketed trees have no universal tags
    const auto sentences = syntax::read_treebank(dir_.path() / "train.ptb");
    std::vector<std::vector<std::string>> words;
    for (const auto& s : sentences) words.push_back(s.words);
    const auto tagged = tagger->tag(words, 3);
    for (size_t i = 0; i < sentences.size(); ++i) EXPECT_EQ(tagged[i].xpos, sentences[i].xpos) << i;

    // A name never seen, found by its capital letter and position; the text goes through WordTokenizer::split.
    train_kind("parser", 120);
    const syntax::Annotator annotator(tagger, syntax::ParserModel::load(dir_.path() / "parser"));
    const auto out = annotator.annotate_texts({"Wildwood serves French food.", ""});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].words, (std::vector<std::string>{"Wildwood", "serves", "French", "food", "."}));
    EXPECT_EQ(out[0].pos, (std::vector<std::string>{"NNP", "VBZ", "JJ", "NN", "."}));
    EXPECT_EQ(syntax::to_string(out[0].tree),
              "(S (NP (NNP Wildwood)) (VP (VBZ serves) (NP (JJ French) (NN food))) (. .))");
    EXPECT_TRUE(out[1].words.empty());
}

TEST_F(MicroSyntax, TaggerReadsConlluWithUniversalTags) {
    std::ofstream(dir_.path() / "train.conllu") << "1\tAromi\t_\tPROPN\tNNP\t_\t2\tnsubj\t_\t_\n"
                                                   "2\tserves\t_\tVERB\tVBZ\t_\t0\troot\t_\t_\n"
                                                   "3\tfood\t_\tNOUN\tNN\t_\t2\tobj\t_\t_\n\n"
                                                   "1\tThe\t_\tDET\tDT\t_\t2\tdet\t_\t_\n"
                                                   "2\tpub\t_\tNOUN\tNN\t_\t3\tnsubj\t_\t_\n"
                                                   "3\tserves\t_\tVERB\tVBZ\t_\t0\troot\t_\t_\n"
                                                   "4\tfood\t_\tNOUN\tNN\t_\t3\tobj\t_\t_\n";
    json config = micro_config("tagger", dir_.path(), 40);
    config["data"]["train"] = (dir_.path() / "train.conllu").string();
    train::train(train::parse_train_config(config, dir_.path()));
    const auto tagger = syntax::TaggerModel::load(dir_.path() / "tagger");
    ASSERT_TRUE(tagger->has_upos());
    const auto tagged = tagger->tag({{"The", "pub", "serves", "food"}});
    EXPECT_EQ(tagged[0].xpos, (std::vector<std::string>{"DT", "NN", "VBZ", "NN"}));
    EXPECT_EQ(tagged[0].upos, (std::vector<std::string>{"DET", "NOUN", "VERB", "NOUN"}));
}

TEST_F(MicroSyntax, ModelsAreRefusedWhereTheyDoNotBelong) {
    train_kind("tagger", 2);
    try {
        load_model(dir_.path() / "tagger", std::nullopt);
        FAIL() << "a tagger loaded as a diffusion model";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("is a part-of-speech tagger (used by `rudder annotate` and the syntax "
                                             "controllers), not a diffusion model"),
                  std::string::npos)
            << e.what();
    }
    try {
        syntax::ParserModel::load(dir_.path() / "tagger");
        FAIL() << "a tagger loaded as a parser";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("is a 'tagger' model, not a constituency parser"), std::string::npos)
            << e.what();
    }
}

TEST_F(MicroSyntax, ConfigErrorsForTreebankKinds) {
    json config = micro_config("parser", dir_.path(), 10);
    std::ofstream(dir_.path() / "train.conllu") << "";
    config["data"]["train"] = (dir_.path() / "train.conllu").string();
    config["training"]["condition_dropout"] = 0.2;
    try {
        train::parse_train_config(config, dir_.path());
        FAIL() << "no ConfigError";
    } catch (const ConfigError& e) {
        ASSERT_EQ(e.issues().size(), 2u) << e.what();
        EXPECT_EQ(e.issues()[0].pointer, "/data/train");
        EXPECT_EQ(
            e.issues()[0].message,
            "the parser trains on constituency trees (.ptb, .mrg, .tree, .trees, optionally .gz); got 'train.conllu'");
        EXPECT_EQ(e.issues()[1].pointer, "/training/condition_dropout");
    }
    // The label sets come from the data.
    config = micro_config("tagger", dir_.path(), 10);
    config["network"]["tags"] = {"NN"};
    try {
        train::train(train::parse_train_config(config, dir_.path()));
        FAIL() << "no ConfigError";
    } catch (const ConfigError& e) {
        ASSERT_EQ(e.issues().size(), 1u) << e.what();
        EXPECT_EQ(e.issues()[0].pointer, "/network/tags");
        EXPECT_EQ(e.issues()[0].message, "filled in from the training data; leave it out");
    }
}

}  // namespace
}  // namespace rudder
