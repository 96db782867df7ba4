// The annotation tools behind `rudder annotate` and the syntax controllers: load a trained tagger or parser model
// directory (config.json "type": "tagger" / "parser", written by `rudder train`), tag and parse batches of
// sentences. This header includes no LibTorch header (the networks are behind a pointer), so a plugin that uses it
// compiles in seconds; it links the static library `rudder_syntax` (LibTorch, and the model-file readers of
// rudder_host).
//
// Two levels:
//   - TaggerModel / ParserModel work on treebank tokens (as in UD EWT and GUM: "It" "'s", "family" "-" "friendly");
//   - Annotator works on Rudder's words (WordTokenizer::split) and projects the token-level results onto them
//     (syntax/words.hpp says how).
// Objects are not thread-safe: call one at a time (the syntax controllers are called one at a time per instance).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <rudder/text/tokenizer.hpp>
#include <rudder/text/tree.hpp>

namespace rudder::syntax {

// Word ids (the vocabulary's id of word_key(token), <unk> if absent) and kWordFeatures feature ids per token,
// appended to `ids` and `features`. The trainer and the models encode alike through this.
void encode_tokens(const WordTokenizer& vocabulary, int64_t buckets, const std::vector<std::string>& tokens,
                   std::vector<int64_t>& ids, std::vector<int64_t>& features);

struct TokenTags {
    std::vector<std::string> xpos;  // PTB tags
    std::vector<std::string> upos;  // universal tags; empty if the tagger has no universal head
};

class TaggerModel {
public:
    // Throws ModelError naming the file and the problem (not a tagger, missing files, bad weights).
    static std::shared_ptr<TaggerModel> load(const std::filesystem::path& dir);
    ~TaggerModel();

    // Tags of each sentence's tokens. Sentences must be non-empty.
    std::vector<TokenTags> tag(const std::vector<std::vector<std::string>>& sentences, int64_t batch_size = 64) const;
    bool has_upos() const;
    const std::filesystem::path& dir() const;

private:
    struct Impl;
    explicit TaggerModel(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

class ParserModel {
public:
    static std::shared_ptr<ParserModel> load(const std::filesystem::path& dir);
    ~ParserModel();

    // The best tree of each sentence (CKY over the network's span scores), with `tags` (one per token) as its
    // preterminals. The root is the sentence's top constituent (e.g. S), not ROOT.
    std::vector<Tree> parse(const std::vector<std::vector<std::string>>& sentences,
                            const std::vector<std::vector<std::string>>& tags, int64_t batch_size = 32) const;
    const std::filesystem::path& dir() const;

private:
    struct Impl;
    explicit ParserModel(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// One annotated text, in Rudder's word positions.
struct Annotation {
    std::vector<std::string> words;
    std::vector<std::string> pos;  // PTB tags; a word split into several tokens joins them ("It's" -> "PRP+VBZ")
    Tree tree;                     // preterminals are `pos`; only with a parser
};

class Annotator {
public:
    // `parser` may be null: tags only.
    Annotator(std::shared_ptr<const TaggerModel> tagger, std::shared_ptr<const ParserModel> parser);

    // Each entry is one sentence's words as WordTokenizer::split gives them; an empty one gives an empty
    // Annotation.
    std::vector<Annotation> annotate(const std::vector<std::vector<std::string>>& sentences) const;
    // Splits each text with WordTokenizer::split first.
    std::vector<Annotation> annotate_texts(const std::vector<std::string>& texts) const;
    bool has_parser() const { return parser_ != nullptr; }

private:
    std::shared_ptr<const TaggerModel> tagger_;
    std::shared_ptr<const ParserModel> parser_;
};

}  // namespace rudder::syntax
