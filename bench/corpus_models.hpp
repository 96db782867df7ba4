// Corpus models of the first n bundled e2e-corpus sentences, for benchmarks that want a cheap denoiser.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <rudder/runtime/model.hpp>
#include <rudder/text/text_files.hpp>

namespace rudder::bench {

// A corpus model of the first `n` bundled sentences (the bundled model itself if n covers them all), written to
// a temporary folder.
inline std::string corpus_model(int64_t n) {
    const std::string bundled = RUDDER_BENCH_MODEL;
    std::vector<std::string> lines = rudder::read_lines(bundled + "/sentences.txt");
    if (n >= static_cast<int64_t>(lines.size())) return bundled;
    lines.resize(static_cast<size_t>(n));
    const auto dir = std::filesystem::temp_directory_path() / ("rudder-bench-corpus-" + std::to_string(n));
    rudder::write_corpus_model(lines, dir);
    return dir.string();
}

}  // namespace rudder::bench
