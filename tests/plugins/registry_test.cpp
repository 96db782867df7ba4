// Discovery: scanning folders, duplicates, the default search path, and resolving a recipe's "plugin" value.
#include "test_support.hpp"

#include <gmock/gmock.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <thread>

namespace rudder::plugins::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// A fresh folder under the system temp dir, removed with the object.
class TempDir {
public:
    explicit TempDir(const std::string& tag) {
        path_ = fs::temp_directory_path() / ("rudder_plugins_test_" + tag + "_" + std::to_string(::getpid()));
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ignored;
        fs::remove_all(path_, ignored);
    }
    const fs::path& path() const { return path_; }

private:
    fs::path path_;
};

// Sets an environment variable for one test and puts the old value back.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old;
        if (value != nullptr)
            ::setenv(name, value, 1);
        else
            ::unsetenv(name);
    }
    ~ScopedEnv() {
        if (old_)
            ::setenv(name_, old_->c_str(), 1);
        else
            ::unsetenv(name_);
    }

private:
    const char* name_;
    std::optional<std::string> old_;
};

std::set<std::string> ids_of(const std::vector<ControllerInfo>& types) {
    std::set<std::string> ids;
    for (const auto& type : types) ids.insert(type.id);
    return ids;
}

std::map<std::string, std::string> reasons_by_file(const std::vector<Rejection>& rejections) {
    std::map<std::string, std::string> reasons;
    for (const auto& rejection : rejections) reasons[rejection.path.filename().string()] = rejection.reason;
    return reasons;
}

TEST(Registry, ListsTheGoodFixturesAndTheReasonsForTheRest) {
    Registry registry({fixture_dir()});
    EXPECT_EQ(ids_of(registry.controllers()), (std::set<std::string>{"abi11",
                                                                     "bad_header",
                                                                     "candidate_bonus",
                                                                     "error_status",
                                                                     "faulty",
                                                                     "forms_probe",
                                                                     "forms_probe_ignores_x0",
                                                                     "good",
                                                                     "hard",
                                                                     "helper_forms",
                                                                     "nan",
                                                                     "near_word",
                                                                     "newer_minor",
                                                                     "noop",
                                                                     "pair_a",
                                                                     "pair_b",
                                                                     "probe",
                                                                     "rows_mask",
                                                                     "slow",
                                                                     "throws"}));

    const auto reasons = reasons_by_file(registry.rejections());
    const std::map<std::string, std::string> expected = {
        {"rudder_wrong_major.so", "another major version"},
        {"rudder_refuses_abi.so", "returned NULL"},
        {"rudder_truncated.so", "truncated"},
        {"rudder_no_entry.so", "exports no rudder_plugin_entry symbol"},
        {"not_a_library.so", "not a shared library"},
        {"rudder_malformed_missing_callbacks.so", "lacks required callbacks"},
        {"rudder_malformed_bad_id.so", "invalid id"},
        {"rudder_malformed_no_controllers.so", "controller_count is 0"},
        {"rudder_malformed_null_controller.so", "is NULL"},
        {"rudder_malformed_no_evaluate.so", "evaluate"},
        {"rudder_malformed_duplicate_id.so", "twice"},
    };
    EXPECT_EQ(reasons.size(), expected.size());
    for (const auto& [file, reason] : expected) {
        ASSERT_EQ(reasons.count(file), 1u) << file << " was not rejected";
        EXPECT_THAT(reasons.at(file), HasSubstr(reason)) << file;
        EXPECT_THAT(reasons.at(file), Not(HasSubstr(fixture_dir().string()))) << "the path is listed apart";
    }
}

TEST(Registry, ScansInFileNameOrder) {
    Registry registry({fixture_dir()});
    const auto& types = registry.controllers();
    ASSERT_FALSE(types.empty());
    for (size_t k = 1; k < types.size(); ++k)
        EXPECT_LE(types[k - 1].path.filename().string(), types[k].path.filename().string());
}

TEST(Registry, ALaterDuplicateIdIsRejected) {
    TempDir first("dup_first"), second("dup_second");
    fs::copy_file(fixture("good"), first.path() / "b_good.so");
    fs::copy_file(fixture("good"), first.path() / "a_good.so");  // sorted first although copied last
    fs::copy_file(fixture("good"), second.path() / "good_again.so");
    Registry registry({first.path(), second.path()});

    ASSERT_EQ(registry.controllers().size(), 1u);
    EXPECT_EQ(registry.controllers()[0].path, first.path() / "a_good.so");
    const auto reasons = reasons_by_file(registry.rejections());
    ASSERT_EQ(reasons.size(), 2u);
    EXPECT_EQ(reasons.at("b_good.so"), "id 'good' already provided by " + (first.path() / "a_good.so").string());
    EXPECT_EQ(reasons.at("good_again.so"), "id 'good' already provided by " + (first.path() / "a_good.so").string());
}

TEST(Registry, SkipsMissingFoldersAndFilesThatAreNotSharedObjects) {
    TempDir dir("not_so");
    fs::copy_file(fixture("good"), dir.path() / "rudder_good.so.1");  // versioned name: not a plugin file
    { std::ofstream(dir.path() / "README.txt") << "notes\n"; }
    fs::create_directory(dir.path() / "folder.so");  // a folder, whatever its name
    Registry registry({dir.path() / "missing", dir.path()});
    EXPECT_TRUE(registry.controllers().empty());
    EXPECT_TRUE(registry.rejections().empty());
}

TEST(Registry, ListingTheSameFolderTwiceIsHarmless) {
    Registry registry({fixture_dir(), fixture_dir() / "."});
    EXPECT_EQ(ids_of(registry.controllers()).count("good"), 1u);
    for (const auto& rejection : registry.rejections())
        EXPECT_THAT(rejection.reason, Not(HasSubstr("already provided"))) << rejection.path;
}

TEST(Registry, DefaultSearchPathPutsTheEnvironmentFirst) {
    {
        ScopedEnv env("RUDDER_PLUGIN_PATH", "/first::/second:");
        const auto dirs = Registry::default_search_path();
        ASSERT_GE(dirs.size(), 2u);
        EXPECT_EQ(dirs[0], fs::path("/first"));
        EXPECT_EQ(dirs[1], fs::path("/second"));
        ASSERT_LE(dirs.size(), 3u);
        if (dirs.size() == 3) {  // the folder beside the executable, only if it exists
            EXPECT_TRUE(dirs[2].is_absolute());
            EXPECT_TRUE(fs::is_directory(dirs[2]));
            EXPECT_EQ(dirs[2], fs::canonical(dirs[2]));
            EXPECT_EQ(dirs[2].filename(), "plugins");
        }
    }
    {
        ScopedEnv env("RUDDER_PLUGIN_PATH", nullptr);
        const auto dirs = Registry::default_search_path();
        ASSERT_LE(dirs.size(), 1u);
        for (const auto& dir : dirs) EXPECT_EQ(dir.parent_path().filename(), "rudder");
    }
}

TEST(Registry, ResolvesAnId) {
    Registry registry({fixture_dir()});
    const ControllerType type = registry.resolve("hard", "/unused");
    EXPECT_EQ(type.id(), "hard");
    EXPECT_EQ(type.path, fixture("hard"));
}

TEST(Registry, ResolvesAPathRelativeToTheBaseDirOrAbsolute) {
    Registry registry({fixture_dir()});
    EXPECT_EQ(registry.resolve("rudder_good.so", fixture_dir()).id(), "good");
    EXPECT_EQ(registry.resolve("./rudder_hard.so", fixture_dir()).id(), "hard");
    EXPECT_EQ(registry.resolve("plugins/rudder_noop.so", fixture_dir().parent_path()).id(), "noop");
    EXPECT_EQ(registry.resolve(fixture("noop").string(), "/somewhere/else").id(), "noop");
}

TEST(Registry, APathToALibraryWithSeveralControllersNeedsASelector) {
    Registry registry({fixture_dir()});
    const std::string message = plugin_error_of([&] { registry.resolve("rudder_pair.so", fixture_dir()); });
    EXPECT_THAT(message, HasSubstr(fixture("pair").string() + ": offers 2 controllers ('pair_a' or 'pair_b')"));
    EXPECT_THAT(message, HasSubstr("name one as 'rudder_pair.so#<id>'"));

    EXPECT_EQ(registry.resolve("rudder_pair.so#pair_b", fixture_dir()).id(), "pair_b");
    EXPECT_EQ(registry.resolve("rudder_good.so#good", fixture_dir()).id(), "good");
    EXPECT_THAT(plugin_error_of([&] { registry.resolve("rudder_pair.so#pair_c", fixture_dir()); }),
                HasSubstr("offers no controller 'pair_c' (it offers 'pair_a' or 'pair_b')"));
}

TEST(Registry, APathOutsideTheSearchPathIsRefusedBeforeLoading) {
    TempDir elsewhere("outside");
    fs::copy_file(fixture("probe"), elsewhere.path() / "rudder_probe_copy.so");
    Registry registry({fixture_dir()});
    const std::string message = plugin_error_of([&] { registry.resolve("rudder_probe_copy.so", elsewhere.path()); });
    EXPECT_THAT(message, HasSubstr((elsewhere.path() / "rudder_probe_copy.so").string() +
                                   ": not in a folder of the plugin search path (" + fixture_dir().string() + ")"));
    EXPECT_THAT(plugin_error_of([&] { Registry({}).resolve(fixture("good").string(), ""); }),
                HasSubstr("not in a folder of the plugin search path (which is empty)"));
    // A path that climbs out through ".." or a symlinked folder is judged by where it really is.
    EXPECT_THAT(plugin_error_of([&] {
                    registry.resolve("../" + elsewhere.path().filename().string() + "/rudder_probe_copy.so",
                                     fs::temp_directory_path() / "x");
                }),
                HasSubstr("not in a folder of the plugin search path"));
    fs::create_directory_symlink(fixture_dir(), elsewhere.path() / "link");
    EXPECT_EQ(registry.resolve("link/rudder_good.so", elsewhere.path()).id(), "good");
    EXPECT_FALSE(registry.in_search_path(elsewhere.path() / "rudder_probe_copy.so"));
    EXPECT_TRUE(registry.in_search_path(elsewhere.path() / "link" / "rudder_good.so"));
}

// A symlink inside a plugin folder is judged by where it leads: to a library outside the search path it is rejected
// (scan) or refused (by path); to one in a folder of the search path it is that library.
TEST(Registry, ASymlinkedLibraryMustLeadIntoTheSearchPath) {
    TempDir plugins("symlinked"), elsewhere("symlink_target");
    fs::copy_file(fixture("probe"), elsewhere.path() / "rudder_probe_copy.so");
    fs::create_symlink(elsewhere.path() / "rudder_probe_copy.so", plugins.path() / "rudder_outside.so");
    fs::create_symlink(fixture("good"), plugins.path() / "rudder_inside.so");
    Registry alone({plugins.path()});
    EXPECT_TRUE(alone.controllers().empty()) << "a library outside the search path was scanned";
    const auto reasons = reasons_by_file(alone.rejections());
    ASSERT_TRUE(reasons.count("rudder_outside.so"));
    EXPECT_EQ(reasons.at("rudder_outside.so"), "a symlink to " + (elsewhere.path() / "rudder_probe_copy.so").string() +
                                                   ", outside the folders of the plugin search path: not loaded");
    EXPECT_FALSE(alone.in_search_path(plugins.path() / "rudder_outside.so"));
    EXPECT_THAT(plugin_error_of([&] { alone.resolve("rudder_outside.so", plugins.path()); }),
                HasSubstr("not in a folder of the plugin search path"));
    EXPECT_THAT(plugin_error_of([&] { alone.resolve("probe", plugins.path()); }), HasSubstr("no controller plugin"));

    Registry both({plugins.path(), fixture_dir()});
    EXPECT_TRUE(both.in_search_path(plugins.path() / "rudder_inside.so"));
    EXPECT_EQ(both.resolve("rudder_inside.so", plugins.path()).id(), "good");
}

// The digest as coreutils' sha256sum prints it: an implementation independent of the host's.
std::string sha256sum(const fs::path& file) {
    const std::string command = "sha256sum '" + file.string() + "'";
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) return "<popen failed>";
    char digest[65] = {0};
    const bool ok = std::fscanf(pipe, "%64s", digest) == 1;
    ::pclose(pipe);
    return ok ? digest : "<sha256sum failed>";
}

TEST(Registry, APinnedDigestLoadsAndAnyOtherIsRefused) {
    Registry registry({fixture_dir()});
    const std::string digest = sha256sum(fixture("hard"));
    ASSERT_EQ(digest.size(), 64u) << digest;
    EXPECT_EQ(registry.resolve("hard", "", digest).sha256(), digest);
    EXPECT_EQ(registry.resolve("rudder_hard.so", fixture_dir(), digest).id(), "hard");

    std::string other = digest;
    other[0] = other[0] == '0' ? '1' : '0';
    const std::string message = plugin_error_of([&] { registry.resolve("hard", "", other); });
    EXPECT_THAT(message, HasSubstr(fixture("hard").string() + ": its SHA-256 is " + digest + ", but the recipe pins " +
                                   other + " for 'hard'; refused"));
    EXPECT_THAT(plugin_error_of([&] { registry.resolve("rudder_hard.so", fixture_dir(), other); }),
                HasSubstr("but the recipe pins " + other));
}

TEST(Registry, AFileReplacedWhileItsOldImageIsLoadedIsRefused) {
    TempDir dir("replaced");
    const fs::path file = dir.path() / "rudder_swap.so";
    fs::copy_file(fixture("noop"), file);
    Registry registry({dir.path()});
    const ControllerType first = registry.resolve("rudder_swap.so", dir.path());  // keeps the image loaded
    EXPECT_EQ(first.id(), "noop");
    EXPECT_EQ(first.sha256(), sha256sum(file));

    // Another library under the same name, as a rebuild or an attacker would leave it: the loader hands back the
    // image it already has for that name, which is not the file whose digest was just taken.
    fs::copy_file(fixture("hard"), dir.path() / "staged.so");
    fs::rename(dir.path() / "staged.so", file);
    EXPECT_THAT(plugin_error_of([&] { registry.resolve("rudder_swap.so", dir.path(), sha256sum(file)); }),
                HasSubstr(file.string() + ": the loaded image does not come from this file"));
}

TEST(Registry, APathToABadLibraryNamesTheFileAndTheReason) {
    Registry registry({fixture_dir()});
    const std::string message = plugin_error_of([&] { registry.resolve("rudder_wrong_major.so", fixture_dir()); });
    EXPECT_THAT(message, HasSubstr(fixture("wrong_major").string() + ": built for plugin ABI 2.0"));
    EXPECT_THAT(plugin_error_of([&] { registry.resolve("rudder_x.so", fixture_dir()); }),
                HasSubstr((fixture_dir() / "rudder_x.so").string() + ": file not found"));
    EXPECT_THAT(
        plugin_error_of([&] { registry.resolve("nowhere/rudder_x.so", fixture_dir()); }),
        HasSubstr((fixture_dir() / "nowhere/rudder_x.so").string() + ": not in a folder of the plugin search path"));
}

TEST(Registry, AnUnknownIdSuggestsNearMissesAndListsRejections) {
    Registry registry({fixture_dir()});
    const std::string message = plugin_error_of([&] { registry.resolve("god", "/unused"); });
    EXPECT_THAT(message, HasSubstr("no controller plugin with id 'god' in " + fixture_dir().string() +
                                   "; did you mean 'good'?"));
    EXPECT_THAT(message, HasSubstr("files that were rejected:"));
    EXPECT_THAT(message, HasSubstr(fixture("truncated").string() + ": controller #0 descriptor is truncated"));
    EXPECT_THAT(message, HasSubstr(fixture("wrong_major").string() + ": built for plugin ABI 2.0"));

    EXPECT_THAT(plugin_error_of([&] { registry.resolve("prob", "/unused"); }), HasSubstr("did you mean 'probe'?"));
    EXPECT_THAT(plugin_error_of([&] { registry.resolve("thorws", "/unused"); }), HasSubstr("did you mean 'throws'?"));
}

TEST(Registry, AnUnknownIdWithNoNearMissListsWhatIsAvailable) {
    Registry registry({fixture_dir()});
    const std::string message = plugin_error_of([&] { registry.resolve("syntax_tree", "/unused"); });
    EXPECT_THAT(message, Not(HasSubstr("did you mean")));
    EXPECT_THAT(message, HasSubstr("available: "));
    EXPECT_THAT(message, HasSubstr("good"));
}

TEST(Registry, AnEmptySearchPathSaysSo) {
    Registry registry({});
    EXPECT_THAT(plugin_error_of([&] { registry.resolve("good", "/unused"); }),
                HasSubstr("no controller plugin with id 'good' in an empty plugin search path"));
    EXPECT_THROW(registry.resolve("", "/unused"), PluginError);
}

TEST(Registry, ConcurrentUseScansOnceAndAgrees) {
    Registry registry({fixture_dir()});
    std::vector<std::thread> threads;
    std::vector<std::string> found(4);
    for (size_t k = 0; k < found.size(); ++k)
        threads.emplace_back([&, k] {
            for (int round = 0; round < 5; ++round) {
                found[k] = registry.resolve(k % 2 == 0 ? "good" : "hard", "").id();
                (void)registry.controllers().size();
            }
        });
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(found, (std::vector<std::string>{"good", "hard", "good", "hard"}));
    EXPECT_EQ(registry.controllers().size(), 20u);
}

}  // namespace
}  // namespace rudder::plugins::testing

namespace rudder::plugins::testing {
namespace {

fs::path broken_fixture_dir() { return RUDDER_TEST_BROKEN_FIXTURE_DIR; }

// Run outside ctest (which sets it for every test), the tests still scan with the build's scanner.
const bool scanner_is_set = ::setenv("RUDDER_PLUGIN_SCANNER", RUDDER_TEST_PLUGIN_SCANNER, 0) == 0;

// Libraries that hang, abort, exit or claim 10^8 controllers, each with the reason a scan gives.
const std::map<std::string, std::string>& broken_reasons() {
    static const std::map<std::string, std::string> reasons = {
        {"rudder_hangs.so", "did not finish loading within 3 s and was stopped"},
        {"rudder_aborts.so", "crashed while loading, killed by signal 6"},
        {"rudder_exits.so", "ended the process with exit status 0 while loading"},
        {"rudder_huge_count.so", "claims 100000000 controllers (controller_count); at most 4096 are accepted"},
    };
    return reasons;
}

// Issue 20, item 12: one bad library anywhere on the path used to take down every run (and the listing).
TEST(PluginIndex, BrokenLibrariesAreListedAndARunLoadsOnlyTheLibraryItNeeds) {
    TempDir cache("index_broken");
    ScopedEnv cache_env("RUDDER_CACHE_DIR", cache.path().c_str());
    ScopedEnv timeout("RUDDER_PLUGIN_SCAN_TIMEOUT", "3");
    Registry registry({broken_fixture_dir(), fixture_dir()});
    EXPECT_EQ(registry.resolve("good", "").id(), "good");
    EXPECT_EQ(registry.resolve("rudder_pair.so#pair_a", fixture_dir()).id(), "pair_a");
    EXPECT_EQ(ids_of(registry.controllers()).count("hard"), 1u);

    const auto reasons = reasons_by_file(registry.rejections());
    for (const auto& [file, reason] : broken_reasons()) {
        ASSERT_EQ(reasons.count(file), 1u) << file << " was not rejected";
        EXPECT_THAT(reasons.at(file), HasSubstr(reason)) << file;
    }
    size_t libraries = 0;
    for (const auto& folder : {broken_fixture_dir(), fixture_dir()})
        for (const auto& entry : fs::directory_iterator(folder))
            libraries += entry.path().extension() == ".so" && !entry.is_directory() ? 1 : 0;
    EXPECT_EQ(registry.scanned_in_child(), libraries) << "every library of both folders scanned once, in a child";

    // Named by path, a broken library is refused with the scan's reason, and never loaded here.
    EXPECT_THAT(plugin_error_of([&] { registry.resolve("rudder_aborts.so", broken_fixture_dir()); }),
                HasSubstr((broken_fixture_dir() / "rudder_aborts.so").string() + ": crashed while loading"));
    EXPECT_THAT(plugin_error_of([&] { registry.resolve("rudder_hangs.so", broken_fixture_dir()); }),
                HasSubstr("did not finish loading"));
    EXPECT_THAT(plugin_error_of([&] { registry.resolve("broken", ""); }),
                HasSubstr("no controller plugin with id 'broken'"));

    // A second registry (a second run) takes everything from the index: no child, the same verdicts.
    Registry again({broken_fixture_dir(), fixture_dir()});
    EXPECT_EQ(reasons_by_file(again.rejections()), reasons);
    EXPECT_EQ(ids_of(again.controllers()), ids_of(registry.controllers()));
    EXPECT_EQ(again.scanned_in_child(), 0u);
    EXPECT_EQ(again.resolve("hard", "").id(), "hard");
}

TEST(PluginIndex, AHugeControllerCountIsRefusedWithoutReadingTheList) {
    EXPECT_THAT(plugin_error_of([&] { load_library(broken_fixture_dir() / "rudder_huge_count.so"); }),
                HasSubstr("claims 100000000 controllers"));
}

TEST(PluginIndex, IsKeptPerFileAndScannedAgainWhenTheFileChanges) {
    TempDir cache("index_cache"), dir("index_libs");
    ScopedEnv cache_env("RUDDER_CACHE_DIR", cache.path().c_str());
    const fs::path file = dir.path() / "rudder_x.so";
    fs::copy_file(fixture("good"), file);
    fs::copy_file(fixture("noop"), dir.path() / "rudder_y.so");

    Registry first({dir.path()});
    EXPECT_EQ(ids_of(first.controllers()), (std::set<std::string>{"good", "noop"}));
    EXPECT_EQ(first.scanned_in_child(), 2u);
    ASSERT_EQ(Registry::index_file(), cache.path() / "plugin-index.json");
    ASSERT_TRUE(fs::exists(Registry::index_file()));
    std::ifstream in(Registry::index_file());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_THAT(text, HasSubstr(fs::canonical(file).string()));
    EXPECT_THAT(text, HasSubstr("\"good\""));

    Registry second({dir.path()});
    EXPECT_EQ(ids_of(second.controllers()), (std::set<std::string>{"good", "noop"}));
    EXPECT_EQ(second.scanned_in_child(), 0u) << "the index must be reused";
    EXPECT_EQ(second.controllers()[0].sha256, sha256sum(file));

    // Another library written over the file (size, mtime, ctime change): scanned again, the others are not.
    fs::copy_file(fixture("hard"), file, fs::copy_options::overwrite_existing);
    Registry third({dir.path()});
    EXPECT_EQ(ids_of(third.controllers()), (std::set<std::string>{"hard", "noop"}));
    EXPECT_EQ(third.scanned_in_child(), 1u);
    EXPECT_EQ(third.controllers()[0].sha256, sha256sum(file));

    // Only the modification time changes: scanned again.
    fs::last_write_time(file, fs::last_write_time(file) - std::chrono::hours(1));
    Registry fourth({dir.path()});
    EXPECT_EQ(ids_of(fourth.controllers()), (std::set<std::string>{"hard", "noop"}));
    EXPECT_EQ(fourth.scanned_in_child(), 1u);

    // A file replaced by another (a new inode): scanned again.
    fs::copy_file(fixture("slow"), dir.path() / "staged.so");
    fs::rename(dir.path() / "staged.so", file);
    Registry fifth({dir.path()});
    EXPECT_EQ(ids_of(fifth.controllers()), (std::set<std::string>{"slow", "noop"}));
    EXPECT_EQ(fifth.scanned_in_child(), 1u);
}

TEST(PluginIndex, ACorruptOrUnwritableIndexOnlyMeansScanningAgain) {
    TempDir cache("index_corrupt");
    {
        ScopedEnv cache_env("RUDDER_CACHE_DIR", cache.path().c_str());
        { std::ofstream(cache.path() / "plugin-index.json") << "{ not json"; }
        Registry registry({fixture_dir()});
        EXPECT_EQ(ids_of(registry.controllers()).count("good"), 1u);
        EXPECT_GT(registry.scanned_in_child(), 0u);
        Registry again({fixture_dir()});
        EXPECT_EQ(again.scanned_in_child(), 0u) << "the corrupt file was replaced";
    }
    for (const char* unusable : {"/proc/rudder-no-such-folder", ""}) {
        ScopedEnv cache_env("RUDDER_CACHE_DIR", unusable);
        Registry registry({fixture_dir()});
        EXPECT_EQ(ids_of(registry.controllers()).count("good"), 1u) << unusable;
        EXPECT_EQ(registry.resolve("good", "").id(), "good");
        Registry again({fixture_dir()});
        EXPECT_EQ(ids_of(again.controllers()).count("good"), 1u);
        EXPECT_GT(again.scanned_in_child(), 0u) << "nothing could be kept in '" << unusable << "'";
    }
}

TEST(PluginIndex, TheCacheFolderFollowsTheEnvironment) {
    {
        ScopedEnv cache_env("RUDDER_CACHE_DIR", "/somewhere/cache");
        EXPECT_EQ(Registry::index_file(), fs::path("/somewhere/cache/plugin-index.json"));
    }
    {
        ScopedEnv cache_env("RUDDER_CACHE_DIR", nullptr);
        ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
        EXPECT_EQ(Registry::index_file(), fs::path("/xdg/rudder/plugin-index.json"));
        ScopedEnv relative("XDG_CACHE_HOME", "relative");
        ScopedEnv home("HOME", "/home/someone");
        EXPECT_EQ(Registry::index_file(), fs::path("/home/someone/.cache/rudder/plugin-index.json"));
    }
}

}  // namespace
}  // namespace rudder::plugins::testing
