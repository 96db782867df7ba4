// Loading one library: ABI negotiation and every reason to reject a file, each named with the file.
#include "test_support.hpp"

#include <gmock/gmock.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <dlfcn.h>

namespace rudder::plugins::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string rejection_of(const std::filesystem::path& file) {
    return plugin_error_of([&] { load_library(file); });
}

TEST(LoadLibrary, AcceptsAWellFormedPlugin) {
    const auto types = load_library(fixture("good"));
    ASSERT_EQ(types.size(), 1u);
    const ControllerType& good = types[0];
    EXPECT_EQ(good.id(), "good");
    EXPECT_EQ(good.version(), "1.2.3");
    EXPECT_EQ(good.description(), "test fixture: a known logit delta");
    EXPECT_EQ(good.params_schema(), "{\"type\":\"object\"}");
    // The C++ helper always declares EVALUATE: its evaluate() exists even when a class does not override it.
    EXPECT_EQ(good.capabilities(), RUDDER_CAP_LOGIT_DELTA | RUDDER_CAP_EVALUATE);
    EXPECT_EQ(good.abi_major(), static_cast<uint32_t>(RUDDER_ABI_MAJOR));
    EXPECT_EQ(good.abi_minor(), static_cast<uint32_t>(RUDDER_ABI_MINOR));
    EXPECT_EQ(good.path, fixture("good"));
    EXPECT_NE(good.library, nullptr);
}

TEST(LoadLibrary, AcceptsANewerMinorWithLargerStructs) {
    const auto types = load_library(fixture("newer_minor"));
    ASSERT_EQ(types.size(), 1u);
    EXPECT_EQ(types[0].id(), "newer_minor");
    EXPECT_EQ(types[0].abi_minor(), static_cast<uint32_t>(RUDDER_ABI_MINOR + 1));
    EXPECT_GT(types[0].desc->struct_size, sizeof(rudder_controller_desc));
    EXPECT_EQ(types[0].params_schema(), "");  // NULL schema reads as empty
}

TEST(LoadLibrary, OffersEveryControllerOfALibrary) {
    const auto types = load_library(fixture("pair"));
    ASSERT_EQ(types.size(), 2u);
    EXPECT_EQ(types[0].id(), "pair_a");
    EXPECT_EQ(types[1].id(), "pair_b");
    EXPECT_EQ(types[0].library, types[1].library);  // one load, shared
}

TEST(LoadLibrary, RejectsAnotherMajor) {
    const std::string message = rejection_of(fixture("wrong_major"));
    EXPECT_THAT(message, StartsWith(fixture("wrong_major").string() + ": "));
    EXPECT_THAT(message, HasSubstr("built for plugin ABI 2.0"));
    EXPECT_THAT(message, HasSubstr("another major version"));
}

TEST(LoadLibrary, RejectsAPluginThatRefusesThisHost) {
    const std::string message = rejection_of(fixture("refuses_abi"));
    EXPECT_THAT(message, StartsWith(fixture("refuses_abi").string() + ": "));
    EXPECT_THAT(message, HasSubstr("rudder_plugin_entry returned NULL"));
    EXPECT_THAT(message, HasSubstr("refused this host's ABI 1."));
}

TEST(LoadLibrary, RejectsATruncatedDescriptor) {
    const std::string message = rejection_of(fixture("truncated"));
    EXPECT_THAT(message, StartsWith(fixture("truncated").string() + ": "));
    EXPECT_THAT(message, HasSubstr("descriptor is truncated: struct_size " +
                                   std::to_string(offsetof(rudder_controller_desc, step))));
}

TEST(LoadLibrary, RejectsALibraryWithoutTheEntrySymbol) {
    // The fixture is a loadable library: the rejection is about the symbol, not the file.
    void* handle = dlopen(fixture("no_entry").c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle, nullptr) << dlerror();
    EXPECT_NE(dlsym(handle, "rudder_fixture_not_an_entry"), nullptr);
    dlclose(handle);

    const std::string message = rejection_of(fixture("no_entry"));
    EXPECT_THAT(message, StartsWith(fixture("no_entry").string() + ": "));
    EXPECT_THAT(message, HasSubstr("exports no rudder_plugin_entry symbol"));
}

TEST(LoadLibrary, RejectsAFileThatIsNotALibraryWithTheLoadersReason) {
    const auto file = fixture_dir() / "not_a_library.so";
    ASSERT_EQ(dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL), nullptr);
    std::string loader_reason = dlerror();  // "<file>: <why>"; the message gives the file once, up front
    loader_reason.erase(0, file.string().size() + 2);
    ASSERT_FALSE(loader_reason.empty());

    const std::string message = rejection_of(file);
    EXPECT_THAT(message, StartsWith(file.string() + ": "));
    EXPECT_THAT(message, HasSubstr("not a shared library"));
    EXPECT_THAT(message, HasSubstr(": " + loader_reason));
    EXPECT_EQ(message.find(file.string()), message.rfind(file.string()));
}

TEST(LoadLibrary, RejectsAMissingFileAndADirectory) {
    const auto missing = fixture_dir() / "rudder_does_not_exist.so";
    EXPECT_EQ(rejection_of(missing), missing.string() + ": file not found");
    EXPECT_THAT(rejection_of(fixture_dir()), HasSubstr("is a directory"));
}

TEST(LoadLibrary, RejectsMalformedControllerDescriptors) {
    const std::pair<const char*, const char*> cases[] = {
        {"malformed_missing_callbacks", "controller 'missing_callbacks' lacks required callbacks: step, last_error"},
        {"malformed_bad_id", "controller #0 has an invalid id 'Bad-Id' (must match [a-z0-9_]+)"},
        {"malformed_no_controllers", "offers no controllers (controller_count is 0)"},
        {"malformed_null_controller", "controller #1 is NULL"},
        {"malformed_no_evaluate", "lacks required callbacks: evaluate (it declares RUDDER_CAP_EVALUATE)"},
        {"malformed_duplicate_id", "offers controller id 'malformed' twice"},
    };
    for (const auto& [name, reason] : cases) {
        const std::string message = rejection_of(fixture(name));
        EXPECT_THAT(message, StartsWith(fixture(name).string() + ": ")) << name;
        EXPECT_THAT(message, HasSubstr(reason)) << name;
    }
}

TEST(LoadLibrary, ARejectedLoadLeavesTheProcessUsable) {
    for (const char* bad : {"wrong_major", "truncated", "no_entry", "malformed_null_controller"})
        EXPECT_THROW(load_library(fixture(bad)), PluginError);
    EXPECT_EQ(load_library(fixture("good")).at(0).id(), "good");
}

TEST(CapabilityNames, NamesEveryBitAndShowsUnknownOnes) {
    EXPECT_TRUE(capability_names(0).empty());
    EXPECT_EQ(capability_names(RUDDER_CAP_LOGIT_DELTA | RUDDER_CAP_HARD_CONSTRAINT),
              (std::vector<std::string>{"logit_delta", "hard_constraint"}));
    EXPECT_EQ(capability_names(RUDDER_CAP_LOGIT_DELTA | RUDDER_CAP_GRADIENT | RUDDER_CAP_HARD_CONSTRAINT |
                               RUDDER_CAP_NEEDS_FRESH_LOGITS | RUDDER_CAP_EVALUATE | RUDDER_CAP_THREAD_SAFE |
                               RUDDER_CAP_ANY_DEVICE),
              (std::vector<std::string>{"logit_delta", "gradient", "hard_constraint", "needs_fresh_logits", "evaluate",
                                        "thread_safe", "any_device"}));
    EXPECT_EQ(
        capability_names(RUDDER_CAP_ROWS | RUDDER_CAP_PACKED_MASK | RUDDER_CAP_CANDIDATES | RUDDER_CAP_IGNORES_X0),
        (std::vector<std::string>{"rows", "packed_mask", "candidates", "ignores_x0"}));
    EXPECT_EQ(capability_names(RUDDER_CAP_GRADIENT | (uint64_t{1} << 40)),
              (std::vector<std::string>{"gradient", "bit40"}));
}

TEST(ControllerTypeAccessors, AnEmptyTypeReadsAsEmpty) {
    const ControllerType empty;
    EXPECT_EQ(empty.id(), "");
    EXPECT_EQ(empty.version(), "");
    EXPECT_EQ(empty.description(), "");
    EXPECT_EQ(empty.params_schema(), "");
    EXPECT_EQ(empty.capabilities(), 0u);
    EXPECT_EQ(empty.abi_major(), 0u);
}

TEST(HostServices, DescribeThisHost) {
    const rudder_host* host = host_services();
    ASSERT_NE(host, nullptr);
    EXPECT_EQ(host, host_services());  // one table for the life of the process
    EXPECT_EQ(host->struct_size, sizeof(rudder_host));
    EXPECT_EQ(host->abi_major, static_cast<uint32_t>(RUDDER_ABI_MAJOR));
    EXPECT_EQ(host->abi_minor, static_cast<uint32_t>(RUDDER_ABI_MINOR));
    EXPECT_STREQ(host->host_name, "rudder");
    EXPECT_STRNE(host->host_version, "");
    ASSERT_NE(host->get_extension, nullptr);
    EXPECT_EQ(host->get_extension(host, "rudder.anything/1"), nullptr);
    EXPECT_EQ(host->get_extension(host, nullptr), nullptr);
}

TEST(HostServices, LogGoesToSpdlogAtTheGivenLevel) {
    auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
    auto previous = spdlog::default_logger();
    auto capture = std::make_shared<spdlog::logger>("capture", sink);
    capture->set_level(spdlog::level::trace);
    spdlog::set_default_logger(capture);

    const rudder_host* host = host_services();
    host->log(host, RUDDER_LOG_DEBUG, "d");
    host->log(host, RUDDER_LOG_INFO, "i");
    host->log(host, RUDDER_LOG_WARN, "w");
    host->log(host, RUDDER_LOG_ERROR, "e");
    host->log(host, 99, "from a newer minor");
    host->log(host, RUDDER_LOG_WARN, nullptr);  // must not crash
    spdlog::set_default_logger(previous);

    const auto messages = sink->last_raw();
    ASSERT_EQ(messages.size(), 6u);
    const spdlog::level::level_enum levels[] = {spdlog::level::debug, spdlog::level::info, spdlog::level::warn,
                                                spdlog::level::err,   spdlog::level::info, spdlog::level::warn};
    const char* payloads[] = {
        "plugin: d", "plugin: i", "plugin: w", "plugin: e", "plugin: from a newer minor", "plugin: (null message)"};
    for (size_t k = 0; k < messages.size(); ++k) {
        EXPECT_EQ(messages[k].level, levels[k]) << k;
        EXPECT_EQ(std::string(messages[k].payload.data(), messages[k].payload.size()), payloads[k]) << k;
    }
}

}  // namespace
}  // namespace rudder::plugins::testing
