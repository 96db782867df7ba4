// Fluency of texts under a trained teacher language model (see nn/teacher.hpp): the loader for a teacher model
// directory and the perplexity behind `rudder score`. Declared apart from the network so that callers (the CLI)
// do not compile LibTorch's nn headers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <rudder/text/tokenizer.hpp>

namespace rudder::nn {
class TeacherLM;
}

namespace rudder {

struct TeacherModel {
    std::filesystem::path dir;
    std::shared_ptr<const Tokenizer> tokenizer;
    std::shared_ptr<nn::TeacherLM> network;
};

// Loads a model directory whose config.json has "type": "teacher" (written by `rudder train` with kind
// "teacher"). Throws ModelError naming the file and the problem.
TeacherModel load_teacher(const std::filesystem::path& dir);

struct PerplexityReport {
    int64_t texts = 0;             // texts scored
    int64_t tokens = 0;            // predictions scored: every text's tokens plus its end token
    int64_t unknown_tokens = 0;    // words outside the teacher's vocabulary, scored as <unk>
    int64_t skipped_too_long = 0;  // texts longer than the teacher's max_length, not scored
    double nll = 0.0;              // summed negative log-likelihood, nats
    double mean_nll() const { return tokens ? nll / static_cast<double>(tokens) : 0.0; }
    double perplexity() const;  // exp(mean_nll)
};

// Perplexity of `texts` under `teacher`: exp of the mean per-token NLL over all scored tokens, end tokens included.
// Throws std::runtime_error if no text can be scored.
PerplexityReport score_texts(const TeacherModel& teacher, const std::vector<std::string>& texts,
                             int64_t batch_size = 64);

}  // namespace rudder
