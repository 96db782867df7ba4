// A test suite over checkpoints that a Python fixture script writes (random weights in a public checkpoint's
// layout, and the reference outputs of an independent plain-PyTorch implementation): the script runs once per suite
// with Debian's python3 into a scratch folder; each test skips, saying why, where python3-torch is missing (the
// script exits 77).
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <rudder/nn/safetensors.hpp>

namespace rudder::test {

inline double max_difference(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

class GeneratedCheckpoints : public ::testing::Test {
protected:
    // Call from the suite's SetUpTestSuite: `script` writes into <temp>/<name>_<pid>, its output in a .log beside.
    static void generate(const std::string& script, const std::string& name) {
        script_ = std::filesystem::path(script).filename().string();
        root_ = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
        std::filesystem::remove_all(root_);
        const std::string command = std::string(RUDDER_PYTHON3) + " " + script + " " + root_.string() + " > " +
                                    (root_.string() + ".log") + " 2>&1";
        const int status = std::system(command.c_str());
        fixture_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    static void TearDownTestSuite() {
        std::filesystem::remove_all(root_);
        std::filesystem::remove(root_.string() + ".log");
    }
    void SetUp() override {
        if (fixture_status_ == 77) GTEST_SKIP() << "python3-torch is missing (scripts/install-deps.sh installs it)";
        ASSERT_EQ(fixture_status_, 0) << script_ << " failed; see " << root_.string() << ".log";
    }
    // A tensor of the script's reference.safetensors.
    static at::Tensor reference(const std::string& name) {
        static const SafeTensors all = load_safetensors(root_ / "reference.safetensors");
        const at::Tensor* t = all.find(name);
        if (!t) throw std::runtime_error("reference tensor '" + name + "' missing");
        return *t;
    }
    // A copy of a generated checkpoint, to break.
    static std::filesystem::path copy_of(const std::string& name, const std::string& as) {
        const std::filesystem::path to = root_ / as;
        std::filesystem::remove_all(to);
        std::filesystem::copy(root_ / name, to);
        return to;
    }
    static void write_json(const std::filesystem::path& file, const nlohmann::json& value) {
        std::ofstream(file) << value.dump(2);
    }

    inline static std::filesystem::path root_;
    inline static int fixture_status_ = -1;
    inline static std::string script_;
};

}  // namespace rudder::test
