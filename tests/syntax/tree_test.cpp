// Trees, treebank files, the chart decoder and the word <-> token mapping, without LibTorch: hand-written inputs
// with exact expected values.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <rudder/text/chart.hpp>
#include <rudder/text/tree.hpp>
#include <rudder/text/treebank.hpp>
#include <rudder/text/words.hpp>

namespace rudder::syntax {
namespace {

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(Tree, ReadsAndWritesBracketNotation) {
    const Tree t = read_tree("(ROOT\n  (S (NP-SBJ (DT The) (NN dog))\n     (VP (VBZ barks))))");
    EXPECT_EQ(to_string(t), "(ROOT (S (NP-SBJ (DT The) (NN dog)) (VP (VBZ barks))))");
    EXPECT_EQ(words(t), (std::vector<std::string>{"The", "dog", "barks"}));
    EXPECT_EQ(tags(t), (std::vector<std::string>{"DT", "NN", "VBZ"}));
    // The Penn Treebank's unlabelled outer brackets become ROOT.
    EXPECT_EQ(to_string(read_tree("( (S (NN Hi)))")), "(ROOT (S (NN Hi)))");
    const auto trees = read_trees("(S (NN a))\n\n(S (NN b))  (FRAG (NN c))");
    ASSERT_EQ(trees.size(), 3u);
    EXPECT_EQ(to_string(trees[2]), "(FRAG (NN c))");
}

TEST(Tree, SyntaxErrorsNameLineAndColumn) {
    EXPECT_EQ(error_of([] { read_tree("(S (NP x y))"); }), "tree:1:10: expected ')' after the word 'x' of 'NP'");
    EXPECT_EQ(error_of([] { read_tree("(S\n  (NP (DT a) ()))", "f.ptb"); }), "f.ptb:2:14: empty brackets '()'");
    EXPECT_EQ(error_of([] { read_tree("(S (NP (DT The) (NN dog))"); }), "tree:1:1: this '(' is never closed");
    EXPECT_EQ(error_of([] { read_trees("(S (NN a)))"); }), "tree:1:11: expected '(' to start a tree, found ')'");
    EXPECT_EQ(error_of([] { read_tree("(S (NN a)) (S (NN b))"); }),
              "tree:1:12: expected one tree, but more text follows");
    EXPECT_EQ(error_of([] { read_tree("(S (NN a) b)"); }),
              "tree:1:11: word 'b' after other children of 'S'; a word must be the only child of its tag");
    EXPECT_EQ(error_of([] { read_tree("  "); }), "tree:1:1: expected a tree, found no text");
}

TEST(Tree, FunctionTagsRootsAndEmptyElements) {
    EXPECT_EQ(strip_function_tags("NP-SBJ"), "NP");
    EXPECT_EQ(strip_function_tags("PP-LOC-PRD"), "PP");
    EXPECT_EQ(strip_function_tags("NP=2"), "NP");
    EXPECT_EQ(strip_function_tags("-NONE-"), "-NONE-");
    EXPECT_EQ(strip_function_tags("-LRB-"), "-LRB-");
    EXPECT_TRUE(is_root_label("ROOT"));
    EXPECT_TRUE(is_root_label("TOP"));
    EXPECT_FALSE(is_root_label("S"));
    const Tree t = read_tree("(ROOT (S (NP-SBJ (-NONE- *T*)) (VP (VB Go) (NP (-NONE- *)))))");
    EXPECT_EQ(to_string(remove_empty_elements(t)), "(ROOT (S (VP (VB Go))))");
    EXPECT_THROW(remove_empty_elements(read_tree("(S (-NONE- *))")), std::invalid_argument);
}

TEST(Tree, LabelledAndChainSpans) {
    const Tree t = read_tree("(ROOT (S (VP (VB Go) (ADVP-TMP (RB now))) (. !)))");
    const std::vector<Span> spans = labelled_spans(t);
    EXPECT_EQ(spans, (std::vector<Span>{{0, 3, "S"}, {0, 2, "VP"}, {1, 2, "ADVP"}}));
    const Tree chain = read_tree("(ROOT (S (VP (VB Go) (ADVP (RB now)))))");
    EXPECT_EQ(labelled_spans(chain), (std::vector<Span>{{0, 2, "S"}, {0, 2, "VP"}, {1, 2, "ADVP"}}));
    EXPECT_EQ(chain_spans(chain), (std::vector<Span>{{0, 2, "S+VP"}, {1, 2, "ADVP"}}));
}

TEST(Tree, TreeFromSpansInvertsChainSpans) {
    for (const char* text : {"(ROOT (S (VP (VB Go) (ADVP (RB now)))))",
                             "(ROOT (S (NP (NNP Aromi)) (VP (VBZ is) (ADJP (RB very) (JJ cheap))) (. .)))",
                             "(ROOT (NP (NP (NNP Aromi)) (, ,) (NP (DT a) (NN pub))))"}) {
        const Tree t = read_tree(text);
        const Tree rebuilt = tree_from_spans(words(t), tags(t), chain_spans(t));
        EXPECT_EQ("(ROOT " + to_string(rebuilt) + ")", std::string(text));
    }
    // Words outside every span hang from a ROOT.
    EXPECT_EQ(to_string(tree_from_spans({"a", "b", "c"}, {"X", "Y", "Z"}, {{1, 3, "NP"}})),
              "(ROOT (X a) (NP (Y b) (Z c)))");
    EXPECT_EQ(error_of([] {
                  tree_from_spans({"a", "b", "c"}, {"X", "Y", "Z"}, {{0, 2, "A"}, {1, 3, "B"}});
              }),
              "tree_from_spans: span [1, 3) crosses another span");
    EXPECT_THROW(tree_from_spans({"a"}, {"X", "Y"}, {}), std::invalid_argument);
}

TEST(Evalb, ScoresLikeCollinsPrm) {
    const Tree gold = read_tree("(ROOT (S (NP-SBJ (DT The) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat))) (. .)))");
    // One bracket wrong: NP over "a" alone instead of "a cat".
    const Tree test = read_tree("(S (NP (DT The) (NN dog)) (VP (VBD saw) (NP (DT a)) (NN cat)) (. .))");
    BracketScore s = evalb(gold, test);
    EXPECT_EQ(s.gold, 4);
    EXPECT_EQ(s.test, 4);
    EXPECT_EQ(s.matched, 3);
    EXPECT_DOUBLE_EQ(s.precision(), 0.75);
    EXPECT_DOUBLE_EQ(s.recall(), 0.75);
    EXPECT_DOUBLE_EQ(s.f1(), 0.75);
    EXPECT_EQ(s.exact, 0);
    // Punctuation is deleted first, so attaching the full stop elsewhere changes nothing.
    const Tree moved = read_tree("(S (NP (DT The) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat)) (. .)))");
    s = evalb(gold, moved);
    EXPECT_EQ(s.matched, 4);
    EXPECT_EQ(s.exact, 1);
    EXPECT_DOUBLE_EQ(s.f1(), 1.0);
    // Unary chains count each node; PRT and ADVP are one label.
    s = evalb(read_tree("(S (VP (VB Go) (PRT (RP on))))"), read_tree("(S (VB Go) (ADVP (RP on)))"));
    EXPECT_EQ(s.gold, 3);
    EXPECT_EQ(s.test, 2);
    EXPECT_EQ(s.matched, 2);
    EXPECT_NEAR(s.f1(), 2 * (1.0 * 2 / 3) / (1.0 + 2.0 / 3), 1e-12);
    // Sums over sentences.
    BracketScore total;
    total += evalb(gold, test);
    total += evalb(gold, moved);
    EXPECT_EQ(total.sentences, 2);
    EXPECT_EQ(total.matched, 7);
    EXPECT_DOUBLE_EQ(total.f1(), 7.0 / 8.0);
    EXPECT_EQ(error_of([&] { evalb(gold, read_tree("(S (NN dog))")); }),
              "evalb: the gold tree has 6 words, the test tree 1");
}

TEST(Chart, CkyFindsTheBestTree) {
    SpanChart c(3);
    for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = i + 1; j <= 3; ++j) c.label_score[static_cast<size_t>(c.at(i, j))] = -1.0f;
    auto set = [&](int64_t i, int64_t j, int64_t label, float score) {
        c.label[static_cast<size_t>(c.at(i, j))] = label;
        c.label_score[static_cast<size_t>(c.at(i, j))] = score;
    };
    set(0, 3, 5, -2.0f);  // the top takes its label even though "no constituent" scores higher
    set(1, 3, 3, 1.0f);
    set(0, 2, 4, 0.5f);
    auto spans = decode_chart(c);
    ASSERT_EQ(spans.size(), 2u);
    EXPECT_EQ((std::vector<int64_t>{spans[0].start, spans[0].end, spans[0].label}), (std::vector<int64_t>{0, 3, 5}));
    EXPECT_EQ((std::vector<int64_t>{spans[1].start, spans[1].end, spans[1].label}), (std::vector<int64_t>{1, 3, 3}));
    set(2, 3, 7, 0.2f);  // a one-word constituent scoring above "none"
    spans = decode_chart(c);
    ASSERT_EQ(spans.size(), 3u);
    EXPECT_EQ((std::vector<int64_t>{spans[2].start, spans[2].end, spans[2].label}), (std::vector<int64_t>{2, 3, 7}));
    // Now the other split is better.
    set(0, 2, 4, 3.0f);
    spans = decode_chart(c);
    ASSERT_EQ(spans.size(), 3u);
    EXPECT_EQ((std::vector<int64_t>{spans[1].start, spans[1].end, spans[1].label}), (std::vector<int64_t>{0, 2, 4}));
}

TEST(Words, SplitsLikeTheTreebanks) {
    using V = std::vector<std::string>;
    EXPECT_EQ(split_word("It's"), (V{"It", "'s"}));
    EXPECT_EQ(split_word("isn't"), (V{"is", "n't"}));
    EXPECT_EQ(split_word("won't"), (V{"wo", "n't"}));
    EXPECT_EQ(split_word("you're"), (V{"you", "'re"}));
    EXPECT_EQ(split_word("Eagle\xE2\x80\x99s"), (V{"Eagle", "\xE2\x80\x99s"}));
    EXPECT_EQ(split_word("cannot"), (V{"can", "not"}));
    EXPECT_EQ(split_word("family-friendly"), (V{"family", "-", "friendly"}));
    EXPECT_EQ(split_word("\xC2\xA3"
                         "20-25"),
              (V{"\xC2\xA3", "20", "-", "25"}));
    EXPECT_EQ(split_word("Aromi"), (V{"Aromi"}));
    EXPECT_EQ(split_word("'s"), (V{"'s"}));
}

TEST(Words, ProjectsTagsAndTreesOntoWords) {
    const Segmentation seg = segment({"It's", "a", "family-friendly", "pub"});
    EXPECT_EQ(seg.tokens, (std::vector<std::string>{"It", "'s", "a", "family", "-", "friendly", "pub"}));
    EXPECT_EQ(seg.first_token, (std::vector<int64_t>{0, 2, 3, 6, 7}));
    const auto pos = project_tags(seg, {"PRP", "VBZ", "DT", "NN", "HYPH", "JJ", "NN"});
    EXPECT_EQ(pos, (std::vector<std::string>{"PRP+VBZ", "DT", "JJ", "NN"}));
    const Tree tokens =
        read_tree("(S (NP (PRP It)) (VP (VBZ 's) (NP (DT a) (ADJP (NN family) (HYPH -) (JJ friendly)) (NN pub))))");
    // NP "It" and VP "'s a ..." cut through "It's": they are dropped; the rest survives in word positions.
    EXPECT_EQ(to_string(project_tree(seg, tokens, pos)),
              "(S (PRP+VBZ It's) (NP (DT a) (ADJP (JJ family-friendly)) (NN pub)))");
    EXPECT_EQ(project_tags(segment({"\xC2\xA3"
                                    "20-25"}),
                           {"$", "CD", "HYPH", "CD"}),
              (std::vector<std::string>{"CD"}));
}

TEST(Words, KeysAndFeatures) {
    EXPECT_EQ(word_key("-LRB-"), "(");
    EXPECT_EQ(word_key("Aromi2"), "aromi0");
    EXPECT_EQ(unescape_ptb("-RCB-"), "}");
    const auto aromi = word_features("Aromi", 1000), zizzi = word_features("Zizzi", 1000),
               zizz = word_features("zizzi", 1000);
    for (int64_t f : aromi) {
        EXPECT_GE(f, 1);
        EXPECT_LT(f, 1000);
    }
    EXPECT_EQ(aromi[kWordFeatures - 1], zizzi[kWordFeatures - 1]);  // the same shape, "Xx"
    EXPECT_NE(zizzi[kWordFeatures - 1], zizz[kWordFeatures - 1]);   // "x"
    EXPECT_EQ(zizzi[0], zizz[0]);                                   // prefixes are lower-cased
    EXPECT_NE(aromi[0], zizzi[0]);
    EXPECT_EQ(word_features("-LRB-", 1000), word_features("(", 1000));
}

class TreebankFiles : public ::testing::Test {
protected:
    std::filesystem::path file(const std::string& name, const std::string& content) {
        const auto path =
            std::filesystem::temp_directory_path() / ("rudder_syntax_" + std::to_string(::getpid()) + "_" + name);
        std::ofstream(path) << content;
        made_.push_back(path);
        return path;
    }
    ~TreebankFiles() override {
        for (const auto& p : made_) std::filesystem::remove(p);
    }
    std::vector<std::filesystem::path> made_;
};

TEST_F(TreebankFiles, ReadsConlluWordsAndTags) {
    const auto path = file("a.conllu",
                           "# text = It's fine.\n"
                           "1-2\tIt's\t_\t_\t_\t_\t_\t_\t_\t_\n"
                           "1\tIt\tit\tPRON\tPRP\t_\t3\tnsubj\t_\t_\n"
                           "2\t's\tbe\tAUX\tVBZ\t_\t3\tcop\t_\t_\n"
                           "3\tfine\tfine\tADJ\tJJ\t_\t0\troot\t_\t_\n"
                           "3.1\tx\tx\tX\tXX\t_\t_\t_\t_\t_\n"
                           "4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_\n\n"
                           "1\tYes\tyes\tINTJ\tUH\t_\t0\troot\t_\t_\n");
    const auto sentences = read_treebank(path);
    ASSERT_EQ(sentences.size(), 2u);
    EXPECT_EQ(sentences[0].words, (std::vector<std::string>{"It", "'s", "fine", "."}));
    EXPECT_EQ(sentences[0].xpos, (std::vector<std::string>{"PRP", "VBZ", "JJ", "."}));
    EXPECT_EQ(sentences[0].upos, (std::vector<std::string>{"PRON", "AUX", "ADJ", "PUNCT"}));
    EXPECT_FALSE(sentences[0].has_tree);
    EXPECT_EQ(sentences[1].source, path.string() + ":9");
}

TEST_F(TreebankFiles, ConlluErrorsNameFileAndLine) {
    const auto short_line = file("b.conllu", "# c\n1\tA\ta\tDET\tDT\t_\t0\troot\t_\t_\n2\tb\tb\tNOUN\tNN\t_\t1\n");
    EXPECT_EQ(error_of([&] { read_conllu(short_line); }),
              short_line.string() + ":3: expected 10 tab-separated columns, found 7");
    const auto gap = file("c.conllu", "1\tA\ta\tDET\tDT\t_\t0\troot\t_\t_\n3\tb\tb\tNOUN\tNN\t_\t1\tx\t_\t_\n");
    EXPECT_EQ(error_of([&] { read_conllu(gap); }), gap.string() + ":2: word id 3 follows 1; ids must count up from 1");
}

TEST_F(TreebankFiles, ReadsPtbAndRejectsOtherNames) {
    const auto path =
        file("d.ptb", "(ROOT (S (NP (NN Rain)) (VP (VBZ falls))))\n\n(ROOT\n (FRAG (NN Yes) (-NONE- *)))\n");
    const auto sentences = read_treebank(path);
    ASSERT_EQ(sentences.size(), 2u);
    EXPECT_TRUE(sentences[0].has_tree);
    EXPECT_EQ(sentences[1].words, (std::vector<std::string>{"Yes"}));
    EXPECT_EQ(sentences[1].source, path.string() + ":3");
    const auto bad = file("e.ptb", "(ROOT (S (NP (NN Rain)) (VP (VBZ falls)))\n");
    EXPECT_EQ(error_of([&] { read_treebank(bad); }), bad.string() + ":1:1: this '(' is never closed");
    EXPECT_EQ(error_of([&] { treebank_format("trees.txt"); }),
              "'trees.txt': not a treebank file name; expected .conllu (CoNLL-U) or .ptb, .mrg, .tree, .trees "
              "(bracketed trees), optionally with .gz");
    EXPECT_EQ(treebank_format("x.conllu.gz"), TreebankFormat::conllu);
}

}  // namespace
}  // namespace rudder::syntax
