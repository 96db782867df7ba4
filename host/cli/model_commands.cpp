// `rudder corpus-model` and `rudder convert-weights`: writing model directories.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <iostream>

#include <rudder/base/output_file.hpp>
#include <rudder/nn/safetensors.hpp>
#include <rudder/runtime/model.hpp>
#include <rudder/text/text_files.hpp>

#include "commands.hpp"

namespace rudder::cli {
namespace {

int cmd_corpus_model(const std::string& input, const std::string& out_dir, const CorpusModelOptions& options) {
    const std::vector<std::string> sentences = read_texts(input);
    write_corpus_model(sentences, out_dir, options);
    const Model model = load_model(out_dir, std::nullopt);
    std::cout << "wrote corpus model " << out_dir << ": " << static_cast<CorpusDenoiser&>(*model.denoiser).corpus_size()
              << " sentences, vocabulary " << model.tokenizer->vocab_size() << "\n";
    return kExitOk;
}

int cmd_convert_weights(const std::string& model, const std::string& dtype_name, const ConvertOptions& options) {
    const std::filesystem::path dir = resolve_model(model, std::filesystem::current_path(), default_model_path());
    // Keys in the file's order: the config is written back in it (below).
    JsonDocument config = read_json_document(dir / "config.json");
    const std::filesystem::path weights = model_file(dir, config.value("weights", std::string("model.safetensors")));
    const auto before = std::filesystem::file_size(weights);
    const ConvertedWeights after = convert_floating_tensors(weights, dtype_name, options);
    const std::filesystem::path written = options.out.empty() ? weights : options.out;
    std::cout << written.string() << ": floating-point tensors stored as " << dtype_name << ", " << before / 1024
              << " KB -> " << after.bytes / 1024 << " KB";
    if (after.clamped > 0) std::cout << "; " << after.clamped << " value(s) clamped to " << dtype_name << "'s range";
    std::cout << "\n";
    if (!options.out.empty()) return kExitOk;  // a file beside the model: its config is the original's
    // A Hugging Face config says how its weights are stored (torch_dtype): it says so again, its keys kept in order.
    if (config.contains("torch_dtype")) {
        config["torch_dtype"] = dtype_name;
        OutputFile out(dir / "config.json");
        out.write(config.dump(2) + "\n");
        out.commit();
        std::cout << (dir / "config.json").string() << ": torch_dtype " << dtype_name << "\n";
    }
    return kExitOk;
}

}  // namespace

void add_model_commands(CLI::App& app, Commands& commands) {
    struct Options {
        std::string corpus_input, corpus_out;
        CorpusModelOptions corpus;
        std::string convert_model, convert_dtype = "float16";
        ConvertOptions convert;
    };
    auto o = std::make_shared<Options>();
    auto* corpus = app.add_subcommand("corpus-model", "Build an exact corpus-denoiser model from sentences");
    corpus->add_option("input", o->corpus_input, "One sentence per line, or E2E CSV (.csv, .csv.gz: the ref column)")
        ->required()
        ->check(CLI::ExistingFile);
    corpus->add_option("out", o->corpus_out, "Model directory to write")->required();
    corpus->add_option("--embed-dim", o->corpus.embed_dim, "Continuous family: embedding width")
        ->check(CLI::Range(1, 4096));
    corpus->add_option("--embed-seed", o->corpus.embed_seed, "Continuous family: embedding seed");
    commands.list.push_back({corpus, [o] { return cmd_corpus_model(o->corpus_input, o->corpus_out, o->corpus); }});

    auto* convert = app.add_subcommand("convert-weights",
                                       "Store a model's floating-point weights as float16 (half the size) or float32");
    convert->add_option("model", o->convert_model, "Bundled model name or model directory")->required();
    convert->add_option("--dtype", o->convert_dtype, "float16 (default), bfloat16 or float32")
        ->check(CLI::IsMember({"float16", "bfloat16", "float32"}));
    convert->add_option("--out", o->convert.out,
                        "Write the converted weights to this file instead of over the model's (which is then kept)");
    convert->add_flag("--clamp", o->convert.clamp,
                      "Store values beyond the dtype's range (65,504 for float16) as its largest instead of refusing");
    commands.list.push_back(
        {convert, [o] { return cmd_convert_weights(o->convert_model, o->convert_dtype, o->convert); }});
}

}  // namespace rudder::cli
