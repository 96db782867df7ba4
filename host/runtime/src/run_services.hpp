// The run services a controller reaches through rudder_run_info, for a run of one model: the model's tokenizer, its
// directory and embedding table, other models by name, and a re-entrant call of the denoiser on the input of the step
// the controller is in (handed over with the call).
#pragma once

#include <rudder/plugins/plugins.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <rudder/runtime/run_types.hpp>
#include <rudder/runtime/model.hpp>

namespace rudder {

class ModelServices final : public plugins::RunServices {
public:
    // `base_dir`: the recipe's folder, where relative model paths start; `model_path`: where bundled names are looked
    // up; `stats`: the generator's, where the sequences denoise() evaluates are counted. All must outlive this.
    // Without `paths`, find_model takes names only (Recipe::model_paths).
    ModelServices(const Model& model, std::filesystem::path base_dir, std::vector<std::filesystem::path> model_path,
                  GenerationStats& stats, bool paths = true);

    std::vector<int64_t> tokenize(const std::string& text) override;
    std::string detokenize(const int64_t* ids, int64_t n) override;
    const std::string* token_text(int64_t id) override;
    at::Tensor denoise(const plugins::StepInputs& step, const std::vector<std::string>& conditions) override;
    std::string model_dir() override;
    at::Tensor embedding() override;
    std::string find_model(const std::string& name) override;
    // The tokenizer's pieces (Tokenizer::pieces), made on first use and kept.
    std::shared_ptr<const TokenPieces> token_pieces() override;

private:
    const Model& model_;
    std::filesystem::path base_dir_;
    std::vector<std::filesystem::path> model_path_;
    GenerationStats& stats_;
    std::shared_ptr<const TokenPieces> pieces_;
    bool pieces_asked_ = false;
    bool paths_;
};

}  // namespace rudder
