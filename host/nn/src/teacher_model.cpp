#include <rudder/nn/teacher_model.hpp>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <rudder/nn/config_error.hpp>
#include <rudder/nn/model_files.hpp>
#include <rudder/nn/safetensors.hpp>
#include <rudder/nn/teacher.hpp>
#include <rudder/nn/weights.hpp>

namespace rudder {
namespace fs = std::filesystem;
using json = nlohmann::json;

TeacherModel load_teacher(const fs::path& dir) {
    const fs::path file = dir / "config.json";
    if (!fs::exists(file))
        throw ModelError("cannot read '" + file.string() + "' (is '" + dir.string() + "' a model directory?)");
    const json config = read_model_config(dir);
    const std::string type = config_string(config, "type", file);
    if (type != "teacher")
        throw ModelError("'" + dir.string() + "' is a '" + type + "' model, not a teacher language model");
    TeacherModel model;
    model.dir = dir;
    const std::shared_ptr<WordTokenizer> tokenizer = load_word_tokenizer(config, dir);
    model.tokenizer = tokenizer;
    try {
        model.network = std::make_shared<nn::TeacherLM>(config.value("network", json()), *tokenizer);
    } catch (const ConfigError& e) {
        std::string text = "'" + file.string() + "': bad \"network\":";
        for (const auto& issue : e.issues()) text += "\n  /network" + issue.pointer + ": " + issue.message;
        throw ModelError(text);
    }
    const fs::path weights = model_file(dir, config_string(config, "weights", file));
    nn::load_module_file(*model.network, weights);
    model.network->eval();
    return model;
}

double PerplexityReport::perplexity() const { return std::exp(mean_nll()); }

PerplexityReport score_texts(const TeacherModel& teacher, const std::vector<std::string>& texts, int64_t batch_size) {
    if (batch_size < 1) throw std::invalid_argument("score_texts: batch_size must be >= 1");
    PerplexityReport report;
    const Tokenizer& tokenizer = *teacher.tokenizer;
    nn::TeacherLM& network = *teacher.network;
    network.eval();
    std::vector<std::vector<int64_t>> encoded;
    for (const auto& text : texts) {
        auto ids = tokenizer.encode(text);
        if (static_cast<int64_t>(ids.size()) > network.max_length()) {
            ++report.skipped_too_long;
            continue;
        }
        for (int64_t id : ids) report.unknown_tokens += id == tokenizer.unk_id();
        report.tokens += static_cast<int64_t>(ids.size()) + 1;
        encoded.push_back(std::move(ids));
    }
    if (encoded.empty())
        throw std::runtime_error(texts.empty() ? "no texts to score"
                                               : "no text fits the teacher's max_length of " +
                                                     std::to_string(network.max_length()) + " tokens");
    report.texts = static_cast<int64_t>(encoded.size());
    for (size_t start = 0; start < encoded.size(); start += static_cast<size_t>(batch_size)) {
        const size_t end = std::min(encoded.size(), start + static_cast<size_t>(batch_size));
        size_t longest = 0;
        for (size_t i = start; i < end; ++i) longest = std::max(longest, encoded[i].size());
        at::Tensor tokens =
            at::full({static_cast<int64_t>(end - start), static_cast<int64_t>(longest)}, tokenizer.pad_id(), at::kLong);
        auto acc = tokens.accessor<int64_t, 2>();
        for (size_t i = start; i < end; ++i)
            for (size_t j = 0; j < encoded[i].size(); ++j)
                acc[static_cast<int64_t>(i - start)][static_cast<int64_t>(j)] = encoded[i][j];
        report.nll += network.text_nll(tokens).sum().item<double>();
    }
    return report;
}

}  // namespace rudder
