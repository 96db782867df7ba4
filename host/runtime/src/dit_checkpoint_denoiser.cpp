#include "dit_checkpoint_denoiser.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <stdexcept>

#include <rudder/nn/model_files.hpp>
#include <rudder/nn/denoiser_net.hpp>
#include <rudder/nn/dit_checkpoint.hpp>
#include <rudder/nn/score_entropy.hpp>
#include <rudder/text/bpe_tokenizer.hpp>
#include <rudder/text/text_files.hpp>
#include <rudder/text/wordpiece_tokenizer.hpp>

namespace rudder {
namespace fs = std::filesystem;

namespace {

DenoiserTraits dit_traits(const nn::DitNetwork* network) {
    if (!network) throw std::invalid_argument("DitCheckpointDenoiser: a network is required");
    const nn::DitConfig& c = network->config();
    DenoiserTraits traits;
    traits.family = Family::discrete;
    traits.vocab_size = c.vocab_size;
    traits.max_length = c.max_length;
    traits.reads_time = c.time_conditioning;
    traits.gives_score_total = c.flavor == nn::DitFlavor::sedd;
    if (c.uniform()) traits.uniform_noise = UniformNoiseSchedule::log_linear(c.schedule_eps);
    traits.decoding_block = c.block_size;
    return traits;
}

}  // namespace

DitCheckpointDenoiser::DitCheckpointDenoiser(std::shared_ptr<nn::DitNetwork> network, bool block_cache)
    : Denoiser(dit_traits(network.get())), network_(std::move(network)), block_cache_(block_cache) {}

DitCheckpointDenoiser::~DitCheckpointDenoiser() = default;

bool DitCheckpointDenoiser::caches_blocks() const {
    return block_cache_ && network_->config().block_size > 0 && !network_->config().time_conditioning;
}

void DitCheckpointDenoiser::to(const at::Device& device) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    network_->to(device);
    cached_ = {};
    cached_tokens_ = at::Tensor();
    cached_length_.clear();
    output_buffers_ = {};
}

uint64_t DitCheckpointDenoiser::working_bytes(int64_t batch, int64_t length) const {
    const auto& c = network_->config();
    const double L = static_cast<double>(length), H = static_cast<double>(c.hidden_size);
    double floats = L * (6 * H + 8 * H) + 2.0 * static_cast<double>(c.n_heads) * L * L +
                    2.0 * L * static_cast<double>(c.vocab_size);
    if (caches_blocks()) floats += 2.0 * L * H * static_cast<double>(c.n_blocks);  // the keys and values kept
    return static_cast<uint64_t>(static_cast<double>(batch) * floats * 4);
}

DenoiserOutput DitCheckpointDenoiser::denoise(const at::Tensor& x, double t, const std::vector<std::string>& conditions,
                                              const Evidence&) {
    if (!(t >= 0.0 && t <= 1.0)) throw std::invalid_argument("denoise: t must be in [0, 1], got " + std::to_string(t));
    for (const auto& condition : conditions)
        if (!condition.empty())
            throw std::invalid_argument("denoise: a condition was given, but these checkpoints are unconditional");
    c10::InferenceMode inference;
    if (caches_blocks()) return DenoiserOutput{denoise_by_blocks(x), {}, {}, {}};
    const at::Tensor sigma = at::full({x.size(0)}, network_->sigma_at(t), at::TensorOptions().dtype(at::kFloat));
    if (network_->config().flavor == nn::DitFlavor::sedd) {
        auto [log_probs, total] = network_->sedd_clean_log_probs_and_score_total(x, sigma);
        return DenoiserOutput{log_probs, {}, {}, total};
    }
    at::Tensor log_probs = network_->clean_log_probs(x, sigma);
    const std::optional<UniformNoiseSchedule>& uniform = traits().uniform_noise;
    if (!uniform) return DenoiserOutput{log_probs, {}, {}, {}};
    // UDLM and DUO: x_theta is the clean token given the other positions (it enters their posterior as that); the
    // loop's clean estimate is the posterior given all of x_t, the position's own noisy token included.
    const int64_t N = x.numel(), V = log_probs.size(-1);
    const at::Tensor sigma_bar =
        at::full({N}, uniform->sigma_bar(std::max(t, 1e-6)), at::TensorOptions().dtype(at::kDouble));
    log_probs = nn::uniform_posterior_from_rest(log_probs.reshape({N, V}), x.reshape({N}).to(log_probs.device()),
                                                sigma_bar.to(log_probs.device()))
                    .clamp_min(nn::kImpossibleLogProb)
                    .view({x.size(0), x.size(1), V});
    return DenoiserOutput{log_probs, {}, {}, {}};
}

at::Tensor DitCheckpointDenoiser::denoise_by_blocks(const at::Tensor& x) {
    const nn::DitConfig& c = network_->config();
    if (x.dim() != 2 || x.scalar_type() != at::kLong) throw std::invalid_argument("denoise: x must be int64 [B, L]");
    const int64_t B = x.size(0), L = x.size(1), V = c.vocab_size, mask = c.mask_id(), block = c.block_size;
    if (L < 1 || L > c.max_length)
        throw std::invalid_argument("denoise: " + std::to_string(L) + " positions; the network takes 1 to " +
                                    std::to_string(c.max_length));
    const at::Tensor tokens = x.to(at::kCPU).contiguous();
    const auto ids = tokens.accessor<int64_t, 2>();
    const auto device = x.device();

    std::lock_guard<std::mutex> lock(cache_mutex_);
    // The output [B, L, V] was most of a call's cost at a public size (200 MB at 1,024 positions: 175 ms, mostly page
    // faults on new memory; 25 ms to fill memory already touched), so it is written into one of two buffers kept
    // here: one the caller no longer
    // holds (neither the tensor nor a view of it is referenced but here). The caller keeps the last call's output
    // while it makes this call, hence two.
    const auto released = [](const at::Tensor& t) {
        return t.defined() && t.use_count() == 1 && t.storage().use_count() == 1;
    };
    at::Tensor out;
    for (const at::Tensor& buffer : output_buffers_)
        if (released(buffer) && buffer.sizes() == at::IntArrayRef{B, L, V} && buffer.device() == device) out = buffer;
    if (!out.defined()) {
        out = at::empty({B, L, V}, at::TensorOptions().dtype(at::kFloat).device(device));
        output_buffers_[released(output_buffers_[0]) || !output_buffers_[0].defined() ? 0 : 1] = out;
    }
    // Every position first as it is outside the current block: a finished token carries itself (SUBS), a masked one
    // has no prediction yet (uniform over the tokens, never the mask).
    out.fill_(-std::log(static_cast<double>(V - 1)));
    out.select(2, mask).fill_(nn::kImpossibleLogProb);
    const at::Tensor flat_x = x.reshape({-1});
    const at::Tensor unmasked = flat_x.ne(mask).nonzero().squeeze(1);
    at::Tensor flat = out.view({B * L, V});
    flat.index_fill_(0, unmasked, nn::kImpossibleLogProb);
    flat.index_put_({unmasked, flat_x.index_select(0, unmasked)}, at::scalar_tensor(0.0f, flat.options()));

    if (!cached_tokens_.defined() || cached_tokens_.size(0) != B || cached_tokens_.size(1) < L) {
        const int64_t heads = c.n_heads, head_dim = c.hidden_size / c.n_heads;
        cached_ = {};
        for (int64_t i = 0; i < c.n_blocks; ++i) {
            cached_.keys.push_back(
                at::empty({B, heads, L, head_dim}, at::TensorOptions().dtype(at::kFloat).device(device)));
            cached_.values.push_back(at::empty_like(cached_.keys.back()));
        }
        cached_tokens_ = at::full({B, L}, -1, at::kLong);
        cached_length_.assign(static_cast<size_t>(B), 0);
    }
    auto cached_ids = cached_tokens_.accessor<int64_t, 2>();
    // Per row: the current block [begin, end), and the finished positions whose cache still holds (a whole number of
    // blocks whose tokens are unchanged); rows that agree on all three run together.
    std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<int64_t>> groups;
    for (int64_t r = 0; r < B; ++r) {
        int64_t first_masked = 0;
        while (first_masked < L && ids[r][first_masked] != mask) ++first_masked;
        if (first_masked == L) continue;  // finished: every position carries its token
        const int64_t begin = first_masked / block * block, end = std::min(begin + block, L);
        int64_t same = 0;
        const int64_t known = std::min(cached_length_[static_cast<size_t>(r)], begin);
        while (same < known && cached_ids[r][same] == ids[r][same]) ++same;
        groups[{same / block * block, begin, end}].push_back(r);
    }
    const at::Tensor sigma_zero = at::zeros({B}, at::TensorOptions().dtype(at::kFloat));  // no time conditioning
    for (const auto& [span, rows] : groups) {
        const auto [reused, begin, end] = span;
        const int64_t G = static_cast<int64_t>(rows.size());
        const bool all_rows = G == B;  // rows are in order, so every row is 0 .. B - 1
        const at::Tensor index = at::tensor(rows, at::kLong).to(device);
        auto of_rows = [&](const at::Tensor& t) { return all_rows ? t : t.index_select(0, index); };
        nn::DitKeyValues past, present;
        if (reused > 0)
            for (int64_t i = 0; i < c.n_blocks; ++i) {
                past.keys.push_back(of_rows(cached_.keys[i].narrow(2, 0, reused)));
                past.values.push_back(of_rows(cached_.values[i].narrow(2, 0, reused)));
            }
        const at::Tensor segment = of_rows(x.narrow(1, reused, end - reused));
        const at::Tensor raw = network_->forward_segment(segment, reused, sigma_zero.narrow(0, 0, G), &past, &present);
        // The newly finished blocks [reused, begin) join the cache.
        if (begin > reused) {
            for (int64_t i = 0; i < c.n_blocks; ++i)
                for (auto [from, to] :
                     {std::pair{&present.keys[i], &cached_.keys[i]}, {&present.values[i], &cached_.values[i]}}) {
                    const at::Tensor finished = from->narrow(2, 0, begin - reused);
                    if (all_rows)
                        to->narrow(2, reused, begin - reused).copy_(finished);
                    else
                        for (int64_t g = 0; g < G; ++g)
                            to->select(0, rows[g]).narrow(1, reused, begin - reused).copy_(finished.select(0, g));
                }
            for (const int64_t r : rows)
                for (int64_t p = reused; p < begin; ++p) cached_ids[r][p] = ids[r][p];
        }
        for (const int64_t r : rows) cached_length_[static_cast<size_t>(r)] = begin;
        const at::Tensor current = nn::subs_log_probs(raw.narrow(1, begin - reused, end - begin).contiguous(),
                                                      segment.narrow(1, begin - reused, end - begin), mask);
        if (all_rows)
            out.narrow(1, begin, end - begin).copy_(current);
        else
            for (int64_t g = 0; g < G; ++g)
                out.select(0, rows[g]).narrow(0, begin, end - begin).copy_(current.select(0, g));
    }
    return out;
}

TokenizerFiles tokenizer_files(const fs::path& dir) {
    std::error_code ec;
    if (fs::exists(dir / "tokenizer.json", ec)) {
        // Hugging Face's file says which model it is; anything but WordPiece goes to the BPE reader, which names what
        // it does not support.
        std::string text;
        try {
            text = read_small_file(dir / "tokenizer.json", kMaxTokenizerFileBytes);
        } catch (const std::runtime_error&) {
            return TokenizerFiles::bpe_json;  // its reader says why the file cannot be read
        }
        const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
        const bool wordpiece = doc.is_object() && doc.contains("model") && doc["model"].is_object() &&
                               doc["model"].value("type", "") == "WordPiece";
        return wordpiece ? TokenizerFiles::wordpiece_json : TokenizerFiles::bpe_json;
    }
    if (fs::exists(dir / "vocab.json", ec) && fs::exists(dir / "merges.txt", ec)) return TokenizerFiles::bpe_pair;
    if (fs::exists(dir / "vocab.txt", ec)) return TokenizerFiles::wordpiece_txt;
    return TokenizerFiles::none;
}

std::string describe_tokenizer_files(TokenizerFiles files) {
    switch (files) {
        case TokenizerFiles::bpe_json: return "byte-level BPE, tokenizer.json";
        case TokenizerFiles::bpe_pair: return "byte-level BPE, vocab.json + merges.txt";
        case TokenizerFiles::wordpiece_json: return "WordPiece, tokenizer.json";
        case TokenizerFiles::wordpiece_txt: return "WordPiece, vocab.txt (BERT's uncased settings)";
        case TokenizerFiles::none: break;
    }
    return "missing: put the model's tokenizer.json beside config.json (docs/checkpoints.md)";
}

namespace {

// The checkpoint's tokenizer from its folder. The GPT-2-vocabulary checkpoints (MDLM, SEDD, BD3-LM, DUO) take GPT-2's
// byte-level BPE: tokenizer.json (Hugging Face's), else vocab.json and merges.txt (GPT-2's own pair); none ships one
// (their code loads Hugging Face's "gpt2"). "<|endoftext|>" ends a text, as the loop's padding token: these models
// were trained on documents joined by it, so a sample ends where the model places it, and `length` ends one there.
// UDLM's LM1B checkpoint takes bert-base-uncased's WordPiece (tokenizer.json, else BERT's vocab.txt): "[PAD]" pads,
// "[MASK]" (which LM1B's text never holds) is the token the loop never draws.
std::shared_ptr<const Tokenizer> checkpoint_tokenizer(const fs::path& dir, const std::string& what, bool bert) {
    const TokenizerFiles files = tokenizer_files(dir);
    try {
        if (bert) {
            WordPieceSpecialNames names;
            names.pad = "[PAD]";
            names.mask = "[MASK]";
            if (files == TokenizerFiles::wordpiece_json)
                return std::make_shared<WordPieceTokenizer>(
                    WordPieceTokenizer::load_json((dir / "tokenizer.json").string(), names));
            if (files == TokenizerFiles::wordpiece_txt)
                return std::make_shared<WordPieceTokenizer>(
                    WordPieceTokenizer::load_vocab_txt((dir / "vocab.txt").string(), true, names));
        } else {
            BpeSpecialNames names;
            names.pad = "<|endoftext|>";
            if (files == TokenizerFiles::bpe_json)
                return std::make_shared<BpeTokenizer>(
                    BpeTokenizer::load_json((dir / "tokenizer.json").string(), names));
            if (files == TokenizerFiles::bpe_pair)
                return std::make_shared<BpeTokenizer>(BpeTokenizer::load_vocab_merges(
                    (dir / "vocab.json").string(), (dir / "merges.txt").string(), {"<|endoftext|>"}, names));
        }
    } catch (const std::runtime_error& e) {
        throw ModelError(std::string("the tokenizer of ") + what + " checkpoint: " + e.what());
    }
    const std::string wanted = bert ? "bert-base-uncased's WordPiece tokenizer.json (or vocab.txt) from Hugging Face's "
                                      "bert-base-uncased repository"
                                    : "GPT-2's tokenizer.json (or vocab.json and merges.txt) from Hugging Face's gpt2 "
                                      "repository";
    throw ModelError(
        "'" + dir.string() + "' is " + what + " checkpoint without its tokenizer: put " + wanted +
        " beside config.json (docs/checkpoints.md)" +
        (files == TokenizerFiles::none ? "" : "; the folder's " + describe_tokenizer_files(files) + " is not one"));
}

}  // namespace

namespace {

// "an MDLM", "a SEDD", ...: how messages name the checkpoint.
std::string checkpoint_what(const nn::DitConfig& parsed) {
    return std::string(parsed.flavor == nn::DitFlavor::mdlm ? "an " : "a ") + nn::dit_flavor_name(parsed.flavor);
}

std::shared_ptr<const Tokenizer> dit_tokenizer_of(const fs::path& dir, const nn::DitConfig& parsed) {
    const std::string what = checkpoint_what(parsed);
    std::shared_ptr<const Tokenizer> tokenizer;
    if (parsed.flavor == nn::DitFlavor::udlm) {
        // UDLM's vocabulary is BERT's own (30,522 for udlm-lm1b): uniform noise needs no token more.
        tokenizer = checkpoint_tokenizer(dir, what, true);
        if (tokenizer->vocab_size() != parsed.vocab_size)
            throw ModelError("'" + dir.string() + "': the tokenizer has " + std::to_string(tokenizer->vocab_size()) +
                             " tokens; the network has " + std::to_string(parsed.vocab_size) +
                             ": another tokenizer than the one it was trained with");
    } else {
        // The network's last id is one token more than GPT-2's: the mask (MDLM, SEDD, BD3-LM), or DUO's "[PAD]",
        // which its data never holds; the loop treats it as the mask, a token never drawn.
        tokenizer = std::make_shared<WithMaskToken>(checkpoint_tokenizer(dir, what, false),
                                                    parsed.uniform() ? "[PAD]" : "<mask>");
        if (tokenizer->vocab_size() != parsed.vocab_size)
            throw ModelError("'" + dir.string() + "': the tokenizer has " +
                             std::to_string(tokenizer->vocab_size() - 1) + " tokens, and with " +
                             (parsed.uniform() ? "\"[PAD]\" " : "the mask ") + std::to_string(tokenizer->vocab_size()) +
                             "; the network has " + std::to_string(parsed.vocab_size) +
                             " (that token is its last id): another tokenizer than the one it was trained with");
    }
    return tokenizer;
}

}  // namespace

std::shared_ptr<const Tokenizer> load_dit_checkpoint_tokenizer(const fs::path& dir, const nlohmann::json& config) {
    return dit_tokenizer_of(dir, nn::parse_dit_config(config, dir / "config.json"));
}

Model load_dit_checkpoint_model(const fs::path& dir, const nlohmann::json& config, std::optional<Family> family) {
    const nn::DitConfig parsed = nn::parse_dit_config(config, dir / "config.json");
    if (family && *family != Family::discrete)
        throw ModelError("'" + dir.string() + "' is " + checkpoint_what(parsed) +
                         " checkpoint: a discrete diffusion model, not a " + family_name(*family) + " one");
    // The tokenizer first: it is small, and a folder without one is refused before gigabytes of weights are read.
    const std::shared_ptr<const Tokenizer> tokenizer = dit_tokenizer_of(dir, parsed);
    Model model;
    model.name = dir.filename().string();
    model.dir = dir;
    model.family = Family::discrete;
    model.tokenizer = tokenizer;
    model.denoiser =
        std::make_shared<DitCheckpointDenoiser>(std::make_shared<nn::DitNetwork>(nn::DitNetwork::load(dir)));
    model.mask_schedule = MaskSchedule(parsed.schedule_eps);
    model.training_layout = parsed.flavor == nn::DitFlavor::udlm
                                ? "sentences framed as BERT frames them ([CLS] ... [SEP]), which Rudder's texts are not"
                                : "packed documents joined by <|endoftext|>, never padded";
    if (const nlohmann::json sampler = dit_checkpoint_sampler(parsed); !sampler.is_null())
        model.recommended_sampler = sampler;
    return model;
}

nlohmann::json dit_checkpoint_sampler(const nn::DitConfig& config) {
    // BD3-LM's sampler (bd3lms diffusion.py: _semi_ar_sampler with first_hitting, nucleus p 0.9 in its scripts).
    if (config.block_size > 0) return {{"name", "first_hitting"}, {"block_length", config.block_size}, {"top_p", 0.9}};
    return nullptr;
}

}  // namespace rudder
