// A small corpus model written to a temporary folder, for end-to-end tests with the exact corpus denoiser.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <rudder/runtime/model.hpp>

namespace rudder::testing {

// 24 restaurant sentences of 5 to 10 tokens; several share prefixes, suffixes and lengths so that constraints
// have to choose among them.
inline const std::vector<std::string>& corpus_sentences() {
    static const std::vector<std::string> s = {
        "The Eagle is a pub .",                                         // 6
        "The Eagle serves cheap French food .",                         // 7
        "The Eagle is a family friendly coffee shop .",                 // 9
        "The Eagle is near Burger King .",                              // 7
        "The Mill is a pub in the city centre .",                       // 10
        "The Mill serves Italian food .",                               // 6
        "Aromi is a coffee shop .",                                     // 6
        "Aromi serves Indian food near the river .",                    // 8
        "Aromi has a high customer rating .",                           // 7
        "Zizzi is a cheap restaurant .",                                // 6
        "Zizzi is not family friendly .",                               // 6
        "Zizzi serves English food in the city centre .",               // 9
        "Cotto is a restaurant near the river .",                       // 8
        "Cotto has a low customer rating .",                            // 7
        "Cotto serves French food .",                                   // 5
        "Strada is an expensive pub .",                                 // 6
        "Strada serves Japanese food near Burger King .",               // 8
        "Strada is a family friendly restaurant in the city centre .",  // 11
        "Giraffe is a pub near the river .",                            // 8
        "Giraffe serves cheap English food .",                          // 6
        "Browns is a coffee shop in the city centre .",                 // 10
        "Browns has an average customer rating .",                      // 7
        "Browns serves Italian food .",                                 // 5
        "The Punter is a cheap coffee shop near the river .",           // 11
    };
    return s;
}

// Writes the corpus model once per process and returns its folder.
inline std::filesystem::path corpus_model_dir() {
    static const std::filesystem::path dir = [] {
        const auto d = std::filesystem::temp_directory_path() /
                       ("rudder-test-corpus-" + std::to_string(static_cast<long>(::getpid())));
        CorpusModelOptions options;
        options.embed_dim = 16;
        options.schedule_steps = 1000;
        write_corpus_model(corpus_sentences(), d, options);
        return d;
    }();
    return dir;
}

}  // namespace rudder::testing
