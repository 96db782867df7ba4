#include "run_services.hpp"

#include <ATen/ATen.h>

#include <stdexcept>

namespace rudder {
namespace fs = std::filesystem;

ModelServices::ModelServices(const Model& model, fs::path base_dir, std::vector<fs::path> model_path,
                             GenerationStats& stats, bool paths)
    : model_(model), base_dir_(std::move(base_dir)), model_path_(std::move(model_path)), stats_(stats), paths_(paths) {}

std::vector<int64_t> ModelServices::tokenize(const std::string& text) { return model_.tokenizer->encode(text); }

std::string ModelServices::detokenize(const int64_t* ids, int64_t n) { return model_.tokenizer->decode(ids, n); }

const std::string* ModelServices::token_text(int64_t id) {
    if (id < 0 || id >= model_.tokenizer->vocab_size()) return nullptr;
    return &model_.tokenizer->token(id);
}

at::Tensor ModelServices::denoise(const plugins::StepInputs& step, const std::vector<std::string>& conditions) {
    if (!model_.denoiser->traits().conditional)
        throw std::logic_error("model '" + model_.name + "' was not trained with a condition");
    if (conditions.empty()) throw std::invalid_argument("denoise needs at least one condition");
    const at::Tensor& state = model_.family == Family::continuous ? step.latent : step.tokens;
    const int64_t n = static_cast<int64_t>(conditions.size()), batch = state.size(0);
    std::vector<std::string> rows;
    rows.reserve(static_cast<size_t>(n * batch));
    for (const auto& c : conditions) rows.insert(rows.end(), static_cast<size_t>(batch), c);
    std::vector<int64_t> repeat(static_cast<size_t>(state.dim()), 1);
    repeat[0] = n;
    Evidence evidence;
    if (step.self_condition.defined()) evidence.self_condition = step.self_condition.repeat(repeat);
    const at::Tensor logits = model_.denoiser->denoise(state.repeat(repeat), step.t, rows, evidence).logits;
    stats_.denoised_sequences += n * batch;  // the control's cost, counted with the loop's
    at::Tensor out = at::log_softmax(logits.to(at::kFloat), -1);
    std::vector<int64_t> shape{n, batch};
    for (int64_t d = 1; d < out.dim(); ++d) shape.push_back(out.size(d));
    return out.reshape(shape);
}

std::string ModelServices::model_dir() {
    std::error_code ec;
    return model_.dir.empty() ? std::string() : fs::absolute(model_.dir, ec).lexically_normal().string();
}

at::Tensor ModelServices::embedding() {
    return model_.family == Family::continuous ? model_.denoiser->embedding() : at::Tensor();
}

std::shared_ptr<const ModelServices::TokenPieces> ModelServices::token_pieces() {
    if (!pieces_asked_) {
        pieces_asked_ = true;
        if (std::optional<rudder::TokenPieces> given = model_.tokenizer->pieces()) {
            auto pieces = std::make_shared<TokenPieces>();
            pieces->text = std::move(given->text);
            pieces->kind_after = std::move(given->kind_after);
            pieces_ = std::move(pieces);
        }
    }
    return pieces_;
}

std::string ModelServices::find_model(const std::string& name) {
    std::error_code ec;
    if (!paths_) {
        // Names only, from the search path: neither a path nor a folder relative to the recipe's.
        if (!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..")
            for (const auto& dir : model_path_)
                if (fs::is_directory(dir / name, ec)) return fs::absolute(dir / name, ec).lexically_normal().string();
        throw ModelError("no model named '" + name.substr(0, 60) +
                         "' in the model folders (models are named here, not given by path)");
    }
    return fs::absolute(resolve_model(name, base_dir_, model_path_), ec).lexically_normal().string();
}

}  // namespace rudder
