// One batch of training data, as every network's loss takes it. Apart from nn/trainable.hpp so that code that only
// builds batches (the trainer's data side) does not compile LibTorch's nn headers.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

namespace rudder::nn {

struct TrainingBatch {
    // A constructor rather than aggregate initialisation, so that {tokens, condition} stays warning-free now that
    // there are more (optional) fields.
    TrainingBatch(at::Tensor tokens_ = {}, at::Tensor condition_ = {}, at::Tensor features_ = {},
                  at::Tensor targets_ = {})
        : tokens(std::move(tokens_)), condition(std::move(condition_)), features(std::move(features_)),
          targets(std::move(targets_)) {}

    at::Tensor tokens;     // int64 [B, L]: a text's ids, then pad_id up to L
    at::Tensor condition;  // int64 [B, C]: the E2E meaning representation's ids, pad_id-padded; undefined if none
    // The syntax networks (nn/syntax_nets.hpp) only; undefined otherwise.
    at::Tensor features;  // int64 [B, L, syntax::kWordFeatures]: hashed sub-word features of each word, 0 at pads
    at::Tensor targets;   // tagger: int64 [B, L, 2] (PTB tag, universal tag; -1 = none); parser and syntax
                          // classifier: int64 [B, L+1, L+1]
                          // label of span [i, j) (0 = not a constituent, -1 = not a span of the sentence)
    at::Tensor tags;      // syntax classifier: int64 [B, L], tag + 1 at each word, 0 after the text
    at::Tensor classes;   // attribute classifier: int64 [B], the text's class
    at::Tensor clean;     // mdlm: bool [B, L], true at a prompt's positions, which are never noised; undefined: none
};

}  // namespace rudder::nn
