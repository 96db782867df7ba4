#include <rudder/text/treebank.hpp>

#include <nlohmann/json.hpp>
#include <rudder/rudder_json.hpp>

#include <stdexcept>

#include <rudder/text/text_files.hpp>

namespace rudder::syntax {
namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> split_tabs(const std::string& line) {
    std::vector<std::string> out;
    size_t start = 0;
    for (;;) {
        const size_t tab = line.find('\t', start);
        out.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
        if (tab == std::string::npos) return out;
        start = tab + 1;
    }
}

}  // namespace

TreebankFormat treebank_format(const fs::path& file) {
    std::string name = file.filename().string();
    if (ends_with(name, ".gz")) name.resize(name.size() - 3);
    if (ends_with(name, ".conllu")) return TreebankFormat::conllu;
    for (const char* ext : {".ptb", ".mrg", ".tree", ".trees"})
        if (ends_with(name, ext)) return TreebankFormat::ptb;
    throw std::invalid_argument("'" + file.string() +
                                "': not a treebank file name; expected .conllu (CoNLL-U) or .ptb, .mrg, .tree, .trees "
                                "(bracketed trees), optionally with .gz");
}

const char* treebank_format_name(TreebankFormat format) {
    return format == TreebankFormat::conllu ? "CoNLL-U" : "bracketed trees";
}

std::vector<TreebankSentence> read_conllu(const fs::path& file) {
    const std::vector<std::string> lines = read_lines(file);
    std::vector<TreebankSentence> out;
    TreebankSentence current;
    int64_t line_no = 0;
    auto fail = [&](const std::string& what) {
        throw std::runtime_error(file.string() + ":" + std::to_string(line_no) + ": " + what);
    };
    auto finish = [&] {
        if (!current.words.empty()) out.push_back(std::move(current));
        current = TreebankSentence();
    };
    for (const auto& line : lines) {
        ++line_no;
        if (line.empty()) {
            finish();
            continue;
        }
        if (line[0] == '#') continue;
        const auto cols = split_tabs(line);
        if (cols.size() != 10) fail("expected 10 tab-separated columns, found " + std::to_string(cols.size()));
        const std::string& id = cols[0];
        if (id.find('-') != std::string::npos || id.find('.') != std::string::npos) continue;  // range / empty node
        int64_t number = 0;
        try {
            size_t used = 0;
            number = std::stoll(id, &used);
            if (used != id.size()) throw std::invalid_argument(id);
        } catch (const std::exception&) {
            fail("bad word id '" + id + "'");
        }
        if (number != static_cast<int64_t>(current.words.size()) + 1)
            fail("word id " + id + " follows " + std::to_string(current.words.size()) + "; ids must count up from 1");
        if (cols[1].empty()) fail("empty word form");
        if (cols[3].empty() || cols[4].empty()) fail("empty UPOS or XPOS column");
        if (current.words.empty()) current.source = file.string() + ":" + std::to_string(line_no);
        current.words.push_back(cols[1]);
        current.upos.push_back(cols[3]);
        current.xpos.push_back(cols[4]);
    }
    finish();
    return out;
}

std::vector<TreebankSentence> read_ptb(const fs::path& file) {
    const std::vector<std::string> lines = read_lines(file);
    std::string text;
    for (const auto& line : lines) text += line + "\n";
    std::vector<TreebankSentence> out;
    // The line each tree starts on, for messages: found by scanning top-level brackets.
    std::vector<int64_t> starts;
    {
        int depth = 0;
        int64_t line = 1;
        for (char c : text) {
            if (c == '\n') ++line;
            if (c == '(' && depth++ == 0) starts.push_back(line);
            if (c == ')') --depth;
        }
    }
    std::vector<Tree> trees = read_trees(text, file.string());
    for (size_t i = 0; i < trees.size(); ++i) {
        TreebankSentence s;
        s.source = file.string() + ":" + std::to_string(i < starts.size() ? starts[i] : 0);
        try {
            s.tree = remove_empty_elements(trees[i]);
        } catch (const std::invalid_argument& e) {
            throw std::runtime_error(s.source + ": " + e.what());
        }
        s.has_tree = true;
        s.words = words(s.tree);
        s.xpos = tags(s.tree);
        for (size_t k = 0; k < s.words.size(); ++k)
            if (s.xpos[k].empty()) throw std::runtime_error(s.source + ": word '" + s.words[k] + "' has no tag");
        out.push_back(std::move(s));
    }
    return out;
}

std::vector<TreebankSentence> read_treebank(const fs::path& file) {
    return treebank_format(file) == TreebankFormat::conllu ? read_conllu(file) : read_ptb(file);
}

std::vector<AnnotatedText> read_annotated_texts(const fs::path& file) {
    std::vector<AnnotatedText> out;
    int64_t line_number = 0;
    for (const auto& line : read_lines(file)) {
        ++line_number;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        try {
            const auto j = json_input::parse(line, json_input::kMaxDepth, false);  // texts may hold any character
            const auto& tree = j.at("tree");
            if (!tree.is_null() && !tree.is_string()) throw std::invalid_argument("\"tree\" must be a string or null");
            out.push_back({line_number, j.at("text").get<std::string>(), j.at("pos").get<std::vector<std::string>>(),
                           tree.is_string() ? tree.get<std::string>() : std::string()});
        } catch (const std::exception& e) {
            throw std::runtime_error(file.string() + ":" + std::to_string(line_number) +
                                     ": expected {\"text\", \"pos\": [...], \"tree\": \"(...)\"} as `rudder annotate` "
                                     "writes it (" +
                                     e.what() + ")");
        }
    }
    return out;
}

}  // namespace rudder::syntax
