// corpus_bleu and text_diversity against values worked out by hand from their definitions (Papineni et al. 2002;
// Li et al. 2016).
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <rudder/text/metrics.hpp>

namespace {

using Words = std::vector<std::string>;

Words words(const std::string& text) {
    Words out;
    std::string w;
    for (char c : text + " ") {
        if (c != ' ')
            w += c;
        else if (!w.empty())
            out.push_back(w), w.clear();
    }
    return out;
}

TEST(CorpusBleu, IdenticalTextsScoreOne) {
    EXPECT_DOUBLE_EQ(rudder::corpus_bleu({words("the eagle is a pub in the city centre")},
                                         {words("the eagle is a pub in the city centre")}),
                     1.0);
}

TEST(CorpusBleu, ClippedPrecisionsAndBrevityPenalty) {
    // Hypothesis of 6 words against a reference of 7: unigrams 5/6 match ("the" clipped to the reference's one),
    // bigrams 4/5, trigrams 3/4, 4-grams 2/3; brevity penalty exp(1 - 7/6).
    const Words hyp = words("the the eagle is a pub");
    const Words ref = words("the eagle is a pub by rivers");
    const double expected = std::exp(std::log(5.0 / 6) / 4 + std::log(4.0 / 5) / 4 + std::log(3.0 / 4) / 4 +
                                     std::log(2.0 / 3) / 4 + (1.0 - 7.0 / 6.0));
    EXPECT_NEAR(rudder::corpus_bleu({hyp}, {ref}), expected, 1e-12);
}

TEST(CorpusBleu, CountsArePooledOverTheCorpus) {
    // Sentence 1 has no 4-gram match, sentence 2 has one: pooled, the corpus score is not zero.
    const std::vector<Words> hyps = {words("a b c x"), words("a b c d")};
    const std::vector<Words> refs = {words("a b c d"), words("a b c d")};
    // unigrams 7/8, bigrams 5/6, trigrams 3/4, 4-grams 1/2; equal lengths, no penalty.
    const double expected =
        std::exp((std::log(7.0 / 8) + std::log(5.0 / 6) + std::log(3.0 / 4) + std::log(1.0 / 2)) / 4);
    EXPECT_NEAR(rudder::corpus_bleu(hyps, refs), expected, 1e-12);
}

TEST(CorpusBleu, NoMatchOfSomeOrderGivesZero) {
    EXPECT_EQ(rudder::corpus_bleu({words("a b c")}, {words("a b c")}), 0.0);  // no 4-grams at all
    EXPECT_EQ(rudder::corpus_bleu({words("x y z w")}, {words("a b c d")}), 0.0);
    EXPECT_EQ(rudder::corpus_bleu({}, {}), 0.0);
}

TEST(MultiReferenceBleu, SeveralReferencesClipByTheLargestCountAndTakeTheClosestLength) {
    // "the the pub by the river": unigram "the" 3 times, clipped by the reference holding it most often (2).
    // unigrams: the 2 of 3, pub 1, by 1, river 1 -> 5/6; bigrams: "the the" (ref 2), "the pub" (ref 1),
    // "pub by" (ref 2), "by the" (ref 2), "the river" (ref 2) -> 5/5; trigrams: "the the pub" (1), "pub by the"
    // (2), "by the river" (2), "the pub by" (none) -> 3/4; 4-grams: "the the pub by" no, "the pub by the" no,
    // "pub by the river" (2) -> 1/3. Lengths 6 against 5 and 8: the closest is 5, no penalty.
    const Words hyp = words("the the pub by the river");
    const std::vector<std::vector<Words>> refs = {{words("the the pub is good"), words("a pub by the river is open")}};
    const double expected =
        std::exp((std::log(5.0 / 6) + std::log(5.0 / 5) + std::log(3.0 / 4) + std::log(1.0 / 3)) / 4);
    EXPECT_NEAR(rudder::multi_reference_bleu({hyp}, refs), expected, 1e-12);
    // Two references as close in length (4 and 8 words for 6): the shorter one is the reference length, so no
    // penalty; the precisions are those against "a b c d" alone (the other shares no word).
    const std::vector<std::vector<Words>> tie = {{words("a b c d"), words("x x x x x x x x")}};
    const double no_penalty =
        std::exp((std::log(4.0 / 6) + std::log(3.0 / 5) + std::log(2.0 / 4) + std::log(1.0 / 3)) / 4);
    EXPECT_NEAR(rudder::multi_reference_bleu({words("a b c d e f")}, tie), no_penalty, 1e-12);
    EXPECT_THROW(rudder::multi_reference_bleu({hyp}, std::vector<std::vector<Words>>{{}}), std::invalid_argument);
}

TEST(BleuWords, SplitAsMtEvalsBasicTokenizationInLowerCase) {
    EXPECT_EQ(rudder::bleu_words("The Eagle, a pub (by the river), costs \u00a320-25; it's 5.5/10."),
              (Words{"the",   "eagle",    ",", "a",  "pub", "(",    "by",  "the", "river", ")", ",",
                     "costs", "\u00a320", "-", "25", ";",   "it's", "5.5", "/",   "10",    "."}));
    EXPECT_EQ(rudder::bleu_words("  Family-friendly.\nYes!"), (Words{"family-friendly", ".", "yes", "!"}));
    EXPECT_TRUE(rudder::bleu_words("").empty());
}

TEST(CorpusBleu, RefusesMismatchedCounts) {
    EXPECT_THROW(rudder::corpus_bleu({words("a")}, {}), std::invalid_argument);
}

TEST(TextDiversity, DistinctNGramsArePooledOverTheTexts) {
    // Words as the tokenizer splits them: "pub." is "pub" and ".". Unigrams: the eagle is a pub . / the eagle is
    // a cafe . -> 7 different of 12; bigrams: 7 different of 10; trigrams: 6 different of 8.
    const auto d = rudder::text_diversity({"the eagle is a pub.", "the eagle is a cafe."});
    EXPECT_EQ(d.texts, 2);
    EXPECT_DOUBLE_EQ(d.mean_words, 6.0);
    EXPECT_DOUBLE_EQ(d.distinct[0], 7.0 / 12);
    EXPECT_DOUBLE_EQ(d.distinct[1], 7.0 / 10);
    EXPECT_DOUBLE_EQ(d.distinct[2], 6.0 / 8);
}

TEST(TextDiversity, RepeatedTextsLowerItAndShortTextsHaveNoHigherOrders) {
    const auto once = rudder::text_diversity({"a b c"});
    const auto twice = rudder::text_diversity({"a b c", "a b c"});
    EXPECT_DOUBLE_EQ(once.distinct[1], 1.0);
    EXPECT_DOUBLE_EQ(twice.distinct[1], 0.5);
    const auto short_texts = rudder::text_diversity({"a", "b"});
    EXPECT_DOUBLE_EQ(short_texts.distinct[0], 1.0);
    EXPECT_EQ(short_texts.distinct[1], 0.0);
    EXPECT_EQ(rudder::text_diversity({}).texts, 0);
}

}  // namespace
