#include "run_service_bridge.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>

namespace rudder::plugins {

void RunServiceBridge::begin_run(RunServices* services, const RunShape& shape, const c10::Device& plugin_device,
                                 rudder_run_info& run) {
    services_ = services;
    shape_ = shape;
    plugin_device_ = plugin_device;
    run.run_ctx = this;
    run.tokenize = &RunServiceBridge::tokenize;
    run.detokenize = &RunServiceBridge::detokenize;
    run.token_text = &RunServiceBridge::token_text;
    run.denoise = &RunServiceBridge::denoise;
    model_dir_ = services != nullptr ? services->model_dir() : std::string();
    run.model_dir = model_dir_.c_str();
    const bool continuous = shape.family == RUDDER_FAMILY_CONTINUOUS;
    embedding_ = services != nullptr && continuous ? services->embedding() : at::Tensor();
    embedding_view_.reset();
    if (embedding_.defined()) {
        embedding_ = embedding_.detach().to(plugin_device, at::kFloat).contiguous();
        embedding_view_ = std::make_unique<TensorView>();
        run.embedding = embedding_view_->bind(embedding_);
    }
    run.find_model = &RunServiceBridge::find_model;
    pieces_ = services != nullptr ? services->token_pieces() : nullptr;  // a child asks for them (kTokenPieces)
    if (run.struct_size >= offsetof(rudder_run_info, token_pieces) + sizeof(run.token_pieces)) {
        run.piece_kinds = pieces_ != nullptr ? static_cast<int32_t>(pieces_->text.size()) : 0;
        run.token_pieces = pieces_ != nullptr ? &RunServiceBridge::token_pieces : nullptr;
    }
}

rudder_status RunServiceBridge::token_pieces(void* run_ctx, int32_t kind, char* bytes, size_t capacity, size_t* n_bytes,
                                             int64_t* offsets, int32_t* kind_after) noexcept {
    auto* self = static_cast<RunServiceBridge*>(run_ctx);
    if (self == nullptr || self->pieces_ == nullptr) return RUDDER_ERR_UNSUPPORTED;
    if (n_bytes == nullptr || offsets == nullptr || (bytes == nullptr && capacity > 0) || kind < 0 ||
        kind >= static_cast<int32_t>(self->pieces_->text.size()))
        return RUDDER_ERR_INVALID_ARGUMENT;
    return isolation::write_token_pieces(self->pieces_->text[static_cast<size_t>(kind)], self->pieces_->kind_after,
                                         bytes, capacity, n_bytes, offsets, kind_after);
}

RunServiceBridge::Call::Call(RunServiceBridge& bridge, const StepInputs* predict_step) : bridge_(bridge) {
    bridge_.service_error_.clear();
    bridge_.predict_step_ = predict_step;
}

RunServiceBridge::Call::~Call() {
    bridge_.predict_step_ = nullptr;
    bridge_.denoise_results_.clear();
}

template <class Body>
rudder_status RunServiceBridge::guard_service(const char* service, Body&& body) noexcept {
    try {
        return body();
    } catch (const std::bad_alloc&) {
        note_service_error(service, "out of memory");
        return RUDDER_ERR_OUT_OF_MEMORY;
    } catch (const std::exception& e) {
        note_service_error(service, e.what());
        return RUDDER_ERR_INTERNAL;
    } catch (...) {
        note_service_error(service, "unknown exception");
        return RUDDER_ERR_INTERNAL;
    }
}

void RunServiceBridge::note_service_error(const char* service, const char* what) noexcept {
    try {
        service_error_ = std::string(service) + ": " + what;
    } catch (...) {
        // Could not even keep the message: the status code alone still reaches the plugin.
    }
}

std::vector<char> RunServiceBridge::serve(uint32_t type, isolation::Reader& r) {
    using namespace isolation;
    Writer w;
    switch (type) {
        case kTokenize: {
            const std::string text = r.text();
            const auto capacity = std::max<int64_t>(0, r.get<int64_t>());
            std::vector<int64_t> ids(static_cast<size_t>(std::min<int64_t>(capacity, 1 << 16)));
            int64_t n = 0;
            rudder_status status = tokenize(this, text.c_str(), ids.data(), static_cast<int64_t>(ids.size()), &n);
            if (status == RUDDER_ERR_BUFFER_TOO_SMALL && n <= capacity) {
                ids.resize(static_cast<size_t>(n));
                status = tokenize(this, text.c_str(), ids.data(), n, &n);
            }
            const int64_t sent = std::min(n, capacity);
            ids.resize(static_cast<size_t>(std::max<int64_t>(sent, 0)), 0);
            w.put<int32_t>(status).put<int64_t>(n);
            for (int64_t i = 0; i < sent; ++i) w.put<int64_t>(ids[static_cast<size_t>(i)]);
            break;
        }
        case kDetokenize: {
            uint64_t size = 0;
            const char* data = r.bytes(size);
            std::vector<int64_t> ids(size / sizeof(int64_t));
            if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * sizeof(int64_t));
            std::string text;
            const rudder_status status =
                services_ == nullptr ? RUDDER_ERR_UNSUPPORTED : guard_service("detokenize", [&]() -> rudder_status {
                    text = services_->detokenize(ids.data(), static_cast<int64_t>(ids.size()));
                    return RUDDER_OK;
                });
            w.put<int32_t>(status);
            if (status == RUDDER_OK) w.text(text);
            break;
        }
        case kTokenPieces: {
            // The number of kinds (at begin), or every kind at once (at the plugin's first call), for the child to
            // answer its plugin's calls from.
            const bool whole = r.get<uint8_t>() != 0;
            w.put<int32_t>(pieces_ != nullptr ? static_cast<int32_t>(pieces_->text.size()) : 0);
            if (pieces_ == nullptr || !whole) break;
            w.put<int64_t>(static_cast<int64_t>(pieces_->kind_after.size()));
            for (int32_t k : pieces_->kind_after) w.put<int32_t>(k);
            for (const auto& kind : pieces_->text)
                for (const auto& piece : kind) w.text(piece);
            break;
        }
        case kTokenText: {
            const char* text = token_text(this, r.get<int64_t>());
            w.put<uint8_t>(text != nullptr ? 1 : 0);
            if (text != nullptr) w.text(text);
            break;
        }
        case kFindModel: {
            const std::string name = r.text();
            std::string dir(4096, '\0');
            size_t n = 0;
            rudder_status status = find_model(this, name.c_str(), dir.data(), dir.size(), &n);
            if (status == RUDDER_ERR_BUFFER_TOO_SMALL) {
                dir.assign(n + 1, '\0');
                status = find_model(this, name.c_str(), dir.data(), dir.size(), &n);
            }
            w.put<int32_t>(status);
            if (status == RUDDER_OK) w.text(dir.substr(0, n));
            break;
        }
        case kDenoise: {
            const auto n = r.get<int32_t>();
            if (n <= 0 || n > 4096)
                throw std::runtime_error("a denoise request for " + std::to_string(n) + " conditions");
            std::vector<std::string> texts;
            for (int32_t i = 0; i < n; ++i) texts.push_back(r.text());
            std::vector<const char*> pointers;
            for (const auto& text : texts) pointers.push_back(text.c_str());
            const DLTensor* logits = nullptr;
            const rudder_status status = denoise(this, pointers.data(), n, &logits);
            w.put<int32_t>(status);
            if (status == RUDDER_OK) {
                const auto& view = denoise_results_.back()->tensor;
                w.bytes(view.data_ptr(), static_cast<size_t>(view.numel()) * sizeof(float));
                denoise_results_.pop_back();
            }
            break;
        }
        default: throw std::runtime_error("an unknown service " + std::to_string(type));
    }
    return std::move(w.data());
}

rudder_status RunServiceBridge::tokenize(void* run_ctx, const char* text, int64_t* out_ids, int64_t capacity,
                                         int64_t* n_ids) noexcept {
    auto* self = static_cast<RunServiceBridge*>(run_ctx);
    if (n_ids != nullptr) *n_ids = 0;
    if (self == nullptr || text == nullptr || n_ids == nullptr || capacity < 0 || (capacity > 0 && out_ids == nullptr))
        return RUDDER_ERR_INVALID_ARGUMENT;
    if (self->services_ == nullptr) return RUDDER_ERR_UNSUPPORTED;
    return self->guard_service("tokenize", [&]() -> rudder_status {
        const std::vector<int64_t> ids = self->services_->tokenize(text);
        const auto count = static_cast<int64_t>(ids.size());
        *n_ids = count;
        std::copy_n(ids.begin(), std::min(count, capacity), out_ids);
        return count <= capacity ? RUDDER_OK : RUDDER_ERR_BUFFER_TOO_SMALL;
    });
}

rudder_status RunServiceBridge::detokenize(void* run_ctx, const int64_t* ids, int64_t n_ids, char* out, size_t capacity,
                                           size_t* n_bytes) noexcept {
    auto* self = static_cast<RunServiceBridge*>(run_ctx);
    if (n_bytes != nullptr) *n_bytes = 0;
    if (self == nullptr || n_bytes == nullptr || n_ids < 0 || (n_ids > 0 && ids == nullptr) ||
        (capacity > 0 && out == nullptr))
        return RUDDER_ERR_INVALID_ARGUMENT;
    if (self->services_ == nullptr) return RUDDER_ERR_UNSUPPORTED;
    return self->guard_service("detokenize", [&]() -> rudder_status {
        const std::string text = self->services_->detokenize(ids, n_ids);
        *n_bytes = text.size();
        if (capacity > 0) {  // always leave a NUL-terminated (possibly cut) string
            const size_t kept = std::min(text.size(), capacity - 1);
            std::memcpy(out, text.data(), kept);
            out[kept] = '\0';
        }
        return text.size() < capacity ? RUDDER_OK : RUDDER_ERR_BUFFER_TOO_SMALL;
    });
}

const char* RunServiceBridge::token_text(void* run_ctx, int64_t id) noexcept {
    auto* self = static_cast<RunServiceBridge*>(run_ctx);
    if (self == nullptr || self->services_ == nullptr) return nullptr;
    try {
        const std::string* text = self->services_->token_text(id);
        return text != nullptr ? text->c_str() : nullptr;
    } catch (const std::exception& e) {
        self->note_service_error("token_text", e.what());
    } catch (...) {
        self->note_service_error("token_text", "unknown exception");
    }
    return nullptr;
}

rudder_status RunServiceBridge::find_model(void* run_ctx, const char* name, char* out, size_t capacity,
                                           size_t* n_bytes) noexcept {
    auto* self = static_cast<RunServiceBridge*>(run_ctx);
    if (self == nullptr || name == nullptr || n_bytes == nullptr || (out == nullptr && capacity > 0))
        return RUDDER_ERR_INVALID_ARGUMENT;
    if (self->services_ == nullptr) return RUDDER_ERR_UNSUPPORTED;
    return self->guard_service("find_model", [&]() -> rudder_status {
        std::string dir;
        try {
            dir = self->services_->find_model(name);
        } catch (const std::runtime_error& e) {  // no such model: the plugin's mistake, not the host's
            self->note_service_error("find_model", e.what());
            return RUDDER_ERR_INVALID_ARGUMENT;
        }
        *n_bytes = dir.size();
        if (dir.size() + 1 > capacity) return RUDDER_ERR_BUFFER_TOO_SMALL;
        std::memcpy(out, dir.c_str(), dir.size() + 1);
        return RUDDER_OK;
    });
}

rudder_status RunServiceBridge::denoise(void* run_ctx, const char* const* conditions, int32_t n_conditions,
                                        const DLTensor** out_logits) noexcept {
    auto* self = static_cast<RunServiceBridge*>(run_ctx);
    if (out_logits != nullptr) *out_logits = nullptr;
    if (self == nullptr || out_logits == nullptr || conditions == nullptr || n_conditions <= 0)
        return RUDDER_ERR_INVALID_ARGUMENT;
    for (int32_t i = 0; i < n_conditions; ++i)
        if (conditions[i] == nullptr) return RUDDER_ERR_INVALID_ARGUMENT;
    if (self->predict_step_ == nullptr) {
        self->note_service_error("denoise", "called outside step() in the PREDICT phase");
        return RUDDER_ERR_UNSUPPORTED;
    }
    if (self->services_ == nullptr) return RUDDER_ERR_UNSUPPORTED;
    return self->guard_service("denoise", [&]() -> rudder_status {
        const std::vector<std::string> texts(conditions, conditions + n_conditions);
        at::Tensor logits;
        try {
            logits = self->services_->denoise(*self->predict_step_, texts);
        } catch (const std::logic_error& e) {  // RunServices' way to say "not now" or "no conditioning"
            self->note_service_error("denoise", e.what());
            return RUDDER_ERR_UNSUPPORTED;
        }
        const RunShape& shape = self->shape_;
        const std::vector<int64_t> expected = {n_conditions, shape.batch_size, shape.seq_len, shape.vocab_size};
        if (!logits.defined() || logits.scalar_type() != at::kFloat || logits.sizes() != at::IntArrayRef(expected))
            throw std::runtime_error(
                "the host denoiser returned " +
                (logits.defined() ? std::string(c10::toString(logits.scalar_type())) + " " + shape_text(logits.sizes())
                                  : std::string("nothing")) +
                ", expected float32 " + shape_text(expected));
        auto view = std::make_unique<TensorView>();
        *out_logits = view->bind(logits.to(self->plugin_device_).contiguous());
        self->denoise_results_.push_back(std::move(view));
        return RUDDER_OK;
    });
}

}  // namespace rudder::plugins
