// Loading one plugin library and negotiating the ABI. Everything a plugin hands us is checked before use: a
// library that fails any check is rejected whole, with a message naming the file and the reason.
#include "library.hpp"

#include <spdlog/fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#ifndef RUDDER_VERSION
#error "RUDDER_VERSION must be defined by the build"
#endif

namespace rudder::plugins {
namespace {

// The smallest struct_size a v1 reader accepts: the struct up to and including its last required member. A newer
// minor appends members, so a larger struct_size is fine.
constexpr size_t kPluginV1Size = offsetof(rudder_plugin, controllers) + sizeof(rudder_plugin::controllers);
constexpr size_t kDescV1Size =
    offsetof(rudder_controller_desc, last_error) + sizeof(rudder_controller_desc::last_error);
// Enough to read struct_size, abi_major and abi_minor, which lead every versioned descriptor.
constexpr size_t kPluginVersionSize = offsetof(rudder_plugin, abi_minor) + sizeof(rudder_plugin::abi_minor);
constexpr size_t kDescVersionSize =
    offsetof(rudder_controller_desc, abi_minor) + sizeof(rudder_controller_desc::abi_minor);
constexpr size_t kDescIdSize = offsetof(rudder_controller_desc, id) + sizeof(rudder_controller_desc::id);

std::string abi_text(uint32_t major, uint32_t minor) { return std::to_string(major) + "." + std::to_string(minor); }

bool is_valid_id(const char* id) {
    if (id == nullptr || *id == '\0') return false;
    for (const char* c = id; *c != '\0'; ++c) {
        const bool ok = (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_';
        if (!ok) return false;
    }
    return true;
}

// Quotes a plugin-provided string for a message, cut short so a garbage pointer to a long run of bytes cannot
// flood the log.
std::string quoted(const char* text) {
    if (text == nullptr) return "NULL";
    std::string s(text);
    if (s.size() > 64) s = s.substr(0, 64) + "...";
    return "'" + s + "'";
}

void host_log(const rudder_host* /*host*/, rudder_log_level level, const char* msg) noexcept {
    try {
        spdlog::level::level_enum spd_level = spdlog::level::info;
        switch (level) {
            case RUDDER_LOG_DEBUG: spd_level = spdlog::level::debug; break;
            case RUDDER_LOG_INFO: spd_level = spdlog::level::info; break;
            case RUDDER_LOG_WARN: spd_level = spdlog::level::warn; break;
            case RUDDER_LOG_ERROR: spd_level = spdlog::level::err; break;
            default: break;  // a level from a newer minor: log it rather than drop it
        }
        spdlog::log(spd_level, "plugin: {}", msg != nullptr ? msg : "(null message)");
    } catch (...) {
        // Logging must never take the plugin (or the host) down.
    }
}

const void* host_get_extension(const rudder_host* /*host*/, const char* /*id*/) noexcept { return nullptr; }

// Checks one controller descriptor; returns "" if usable, else the reason.
std::string check_controller(const rudder_controller_desc* desc, uint32_t index) {
    const std::string which = "controller #" + std::to_string(index);
    if (desc == nullptr) return which + " is NULL";
    if (desc->struct_size < kDescVersionSize)
        return which + " descriptor is truncated: struct_size " + std::to_string(desc->struct_size);
    if (desc->abi_major != RUDDER_ABI_MAJOR)
        return which + (desc->struct_size >= kDescIdSize ? " (" + quoted(desc->id) + ")" : std::string()) +
               " was built for plugin ABI " + abi_text(desc->abi_major, desc->abi_minor) + ", this host speaks " +
               abi_text(RUDDER_ABI_MAJOR, RUDDER_ABI_MINOR) + " (another major version)";
    if (desc->struct_size < kDescV1Size)
        return which + " descriptor is truncated: struct_size " + std::to_string(desc->struct_size) +
               " is smaller than the " + std::to_string(kDescV1Size) + " bytes ABI " + abi_text(RUDDER_ABI_MAJOR, 0) +
               " requires";
    if (!is_valid_id(desc->id)) return which + " has an invalid id " + quoted(desc->id) + " (must match [a-z0-9_]+)";

    std::string missing;
    auto require = [&missing](bool present, const char* name) {
        if (present) return;
        if (!missing.empty()) missing += ", ";
        missing += name;
    };
    require(desc->create != nullptr, "create");
    require(desc->destroy != nullptr, "destroy");
    require(desc->begin != nullptr, "begin");
    require(desc->step != nullptr, "step");
    require(desc->last_error != nullptr, "last_error");
    require(desc->evaluate != nullptr || (desc->capabilities & RUDDER_CAP_EVALUATE) == 0,
            "evaluate (it declares RUDDER_CAP_EVALUATE)");
    if (!missing.empty()) return "controller '" + std::string(desc->id) + "' lacks required callbacks: " + missing;
    // The COMMIT phase's answer comes with token bits (what a rejected row allows): a controller that declares it
    // must declare the outputs it needs. A descriptor older than 1.3 cannot have meant the bit.
    constexpr uint64_t kCommitNeeds = RUDDER_CAP_HARD_CONSTRAINT | RUDDER_CAP_PACKED_MASK;
    if (desc->abi_minor >= 3 && (desc->capabilities & RUDDER_CAP_COMMIT) != 0 &&
        (desc->capabilities & kCommitNeeds) != kCommitNeeds)
        return "controller '" + std::string(desc->id) +
               "' declares RUDDER_CAP_COMMIT without RUDDER_CAP_HARD_CONSTRAINT and RUDDER_CAP_PACKED_MASK, which the "
               "COMMIT phase needs (it answers with token_bits)";
    if (desc->abi_minor > RUDDER_ABI_MINOR)
        spdlog::debug("controller '{}' was built for the newer plugin ABI {}; using its {} part", desc->id,
                      abi_text(desc->abi_major, desc->abi_minor), abi_text(RUDDER_ABI_MAJOR, RUDDER_ABI_MINOR));
    return {};
}

// An open file descriptor, closed on every path out.
class FileDescriptor {
public:
    explicit FileDescriptor(int fd) : fd_(fd) {}
    FileDescriptor(const FileDescriptor&) = delete;
    FileDescriptor& operator=(const FileDescriptor&) = delete;
    ~FileDescriptor() {
        if (fd_ >= 0) ::close(fd_);
    }
    int get() const { return fd_; }

private:
    int fd_;
};

// SHA-256 of everything readable from `fd`, as 64 lowercase hex digits.
std::string sha256_of(int fd, const std::filesystem::path& path) {
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
        throw LoadError(path, "could not start a SHA-256 digest (OpenSSL)");
    std::vector<unsigned char> buffer(1 << 16);
    for (;;) {
        const ssize_t n = ::read(fd, buffer.data(), buffer.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw LoadError(path, std::string("could not be read: ") + std::strerror(errno));
        if (n == 0) break;
        EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<size_t>(n));
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    EVP_DigestFinal_ex(ctx.get(), digest, &size);
    std::string hex;
    char byte[3];
    for (unsigned int i = 0; i < size; ++i) {
        std::snprintf(byte, sizeof byte, "%02x", digest[i]);
        hex += byte;
    }
    return hex;
}

// The file (device, inode) that the mapping holding `address` in this process comes from, read from
// /proc/self/maps; nullopt if the address is in no file mapping.
std::optional<std::pair<dev_t, ino_t>> mapped_file_of(const void* address) {
    std::ifstream maps("/proc/self/maps");
    const auto target = reinterpret_cast<uintptr_t>(address);
    std::string line;
    while (std::getline(maps, line)) {
        unsigned long long start = 0, end = 0, inode = 0;
        unsigned int dev_major = 0, dev_minor = 0;
        // "start-end perms offset major:minor inode path"
        if (std::sscanf(line.c_str(), "%llx-%llx %*s %*s %x:%x %llu", &start, &end, &dev_major, &dev_minor, &inode) !=
            5)
            continue;
        if (target >= start && target < end) {
            if (inode == 0) return std::nullopt;
            return std::make_pair(makedev(dev_major, dev_minor), static_cast<ino_t>(inode));
        }
    }
    return std::nullopt;
}

// One Library object per loaded image, process-wide. Loading a file that is already loaded gives the same image (and
// the same plugin descriptor), and its controllers that are not THREAD_SAFE must share one call mutex however many
// registries loaded it: each generator of the C API has its own registry, and generators run on different threads.
std::shared_ptr<Library> shared_library_object(boost::dll::shared_library shared, const std::filesystem::path& path,
                                               const rudder_plugin* plugin, const std::string& sha256) {
    static std::mutex mutex;
    static std::map<const rudder_plugin*, std::weak_ptr<Library>> loaded;
    std::lock_guard<std::mutex> lock(mutex);
    std::weak_ptr<Library>& slot = loaded[plugin];
    if (std::shared_ptr<Library> existing = slot.lock()) return existing;  // `shared` closes: the image stays loaded
    auto library = std::make_shared<Library>(std::move(shared), path, plugin, sha256);
    slot = library;
    return library;
}

std::vector<ControllerType> load_checked(const std::filesystem::path& path) {
    std::error_code fs_error;
    const auto status = std::filesystem::status(path, fs_error);
    if (!std::filesystem::exists(status)) throw LoadError(path, "file not found");
    if (std::filesystem::is_directory(status)) throw LoadError(path, "is a directory, not a shared library");

    // The digest a recipe may pin is of the file that is actually mapped: it is read through a descriptor opened
    // before loading, and once loaded, the image's mapping must come from that same file (device and inode), so a
    // file replaced between the two cannot slip through.
    const FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (file.get() < 0) throw LoadError(path, std::string("could not be opened: ") + std::strerror(errno));
    struct stat file_stat {};
    if (::fstat(file.get(), &file_stat) != 0)
        throw LoadError(path, std::string("could not be read: ") + std::strerror(errno));
    const std::string sha256 = sha256_of(file.get(), path);

    // RTLD_NOW: an unresolved symbol is a load error here, not a crash in the middle of a run. RTLD_LOCAL: one
    // plugin's symbols never satisfy another's. Never RTLD_DEEPBIND: it breaks the C++ runtime and sanitizers.
    boost::dll::shared_library shared;
    boost::dll::fs::error_code load_error;
    ::dlerror();  // clear any stale message so the one we read below is ours
    shared.load(boost::dll::fs::path(path.string()), load_error,
                boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
    if (load_error || !shared.is_loaded()) {
        const char* dl_reason = ::dlerror();
        std::string why = dl_reason != nullptr ? dl_reason : load_error.message();
        // dlerror() starts with the file name, which the message already leads with.
        const std::string path_prefix = path.string() + ": ";
        if (why.compare(0, path_prefix.size(), path_prefix) == 0) why.erase(0, path_prefix.size());
        throw LoadError(path, "not a shared library the host can load: " + why);
    }
    if (!shared.has(RUDDER_PLUGIN_ENTRY_SYMBOL))
        throw LoadError(path, "exports no " RUDDER_PLUGIN_ENTRY_SYMBOL
                              " symbol (not a Rudder plugin, or built without rudder_add_controller)");
    using EntryFunction = std::remove_pointer_t<rudder_plugin_entry_fn>;
    rudder_plugin_entry_fn entry = &shared.get<EntryFunction>(RUDDER_PLUGIN_ENTRY_SYMBOL);
    const auto mapped = mapped_file_of(reinterpret_cast<const void*>(entry));
    if (!mapped || mapped->first != file_stat.st_dev || mapped->second != file_stat.st_ino)
        throw LoadError(path,
                        "the loaded image does not come from this file: an older version of the file is still "
                        "loaded in this process, or the file was replaced while it was being loaded; restart the "
                        "process to load the current file");

    const rudder_plugin* plugin = nullptr;
    try {
        plugin = entry(RUDDER_ABI_MAJOR, RUDDER_ABI_MINOR);
    } catch (...) {
        throw LoadError(path, RUDDER_PLUGIN_ENTRY_SYMBOL " let an exception escape across the C ABI");
    }
    if (plugin == nullptr)
        throw LoadError(path, RUDDER_PLUGIN_ENTRY_SYMBOL " returned NULL: the plugin refused this host's ABI " +
                                  abi_text(RUDDER_ABI_MAJOR, RUDDER_ABI_MINOR));
    if (plugin->struct_size < kPluginVersionSize)
        throw LoadError(path, "plugin descriptor is truncated: struct_size " + std::to_string(plugin->struct_size));
    if (plugin->abi_major != RUDDER_ABI_MAJOR)
        throw LoadError(path, "built for plugin ABI " + abi_text(plugin->abi_major, plugin->abi_minor) +
                                  ", this host speaks " + abi_text(RUDDER_ABI_MAJOR, RUDDER_ABI_MINOR) +
                                  " (another major version)");
    if (plugin->struct_size < kPluginV1Size)
        throw LoadError(path, "plugin descriptor is truncated: struct_size " + std::to_string(plugin->struct_size) +
                                  " is smaller than the " + std::to_string(kPluginV1Size) + " bytes ABI " +
                                  abi_text(RUDDER_ABI_MAJOR, 0) + " requires");
    if (plugin->controller_count == 0) throw LoadError(path, "offers no controllers (controller_count is 0)");
    if (plugin->controller_count > kMaxControllersPerLibrary)
        throw LoadError(path, "claims " + std::to_string(plugin->controller_count) +
                                  " controllers (controller_count); at most " +
                                  std::to_string(kMaxControllersPerLibrary) + " are accepted");
    if (plugin->controllers == nullptr) throw LoadError(path, "controller list is NULL");
    if (plugin->abi_minor > RUDDER_ABI_MINOR)
        spdlog::debug("{}: built for the newer plugin ABI {}; using its {} part", path.string(),
                      abi_text(plugin->abi_major, plugin->abi_minor), abi_text(RUDDER_ABI_MAJOR, RUDDER_ABI_MINOR));

    std::set<std::string> ids;
    for (uint32_t i = 0; i < plugin->controller_count; ++i) {
        const std::string problem = check_controller(plugin->controllers[i], i);
        if (!problem.empty()) throw LoadError(path, problem);
        if (!ids.insert(plugin->controllers[i]->id).second)
            throw LoadError(path, "offers controller id '" + std::string(plugin->controllers[i]->id) + "' twice");
    }

    spdlog::debug("{}: plugin '{}' speaks ABI {} (this host {}), offers {}", path.string(),
                  plugin->name != nullptr ? plugin->name : "", abi_text(plugin->abi_major, plugin->abi_minor),
                  abi_text(RUDDER_ABI_MAJOR, RUDDER_ABI_MINOR), fmt::join(ids, ", "));
    const std::shared_ptr<Library> library = shared_library_object(std::move(shared), path, plugin, sha256);
    std::vector<ControllerType> types;
    types.reserve(plugin->controller_count);
    for (uint32_t i = 0; i < plugin->controller_count; ++i)
        types.push_back(ControllerType{library, plugin->controllers[i], path});
    return types;
}

}  // namespace

std::vector<ControllerType> load_library(const std::filesystem::path& path) {
    try {
        return load_checked(path);
    } catch (const LoadError&) {
        throw;
    } catch (const std::exception& e) {  // boost::system, std::filesystem, bad_alloc: still a clean rejection
        throw LoadError(path, std::string("could not be loaded: ") + e.what());
    } catch (...) {
        throw LoadError(path, "could not be loaded: unknown exception");
    }
}

ScanResult describe_library(const std::filesystem::path& path) {
    ScanResult result;
    try {
        const std::vector<ControllerType> types = load_library(path);
        const char* name = types.front().library->plugin().name;
        result.plugin = name != nullptr ? name : "";
        result.sha256 = types.front().sha256();
        for (const auto& type : types) {
            ControllerInfo info;
            info.id = type.id();
            info.version = type.version();
            info.description = type.description();
            info.capabilities = type.capabilities();
            info.abi_major = type.abi_major();
            info.abi_minor = type.abi_minor();
            info.plugin = result.plugin;
            info.sha256 = result.sha256;
            result.controllers.push_back(std::move(info));
        }
        result.ok = true;
    } catch (const LoadError& e) {
        result.reason = e.reason();
    } catch (const std::exception& e) {
        result.reason = std::string("could not be loaded: ") + e.what();
    } catch (...) {
        result.reason = "could not be loaded: unknown exception";
    }
    return result;
}

const rudder_host* host_services() {
    static const rudder_host host = {sizeof(rudder_host), RUDDER_ABI_MAJOR, RUDDER_ABI_MINOR,   "rudder",
                                     RUDDER_VERSION,      &host_log,        &host_get_extension};
    return &host;
}

std::string plugin_message(const rudder_controller_desc* desc, void* self) {
    constexpr size_t kMaxPluginMessage = 16 * 1024;  // a longer last_error() is cut: it is a message, not data
    const char* message = nullptr;
    try {
        message = desc->last_error(self);
    } catch (...) {
        message = nullptr;
    }
    if (message == nullptr || *message == '\0') return "(the plugin gave no message)";
    const char* end = static_cast<const char*>(std::memchr(message, '\0', kMaxPluginMessage));
    return end != nullptr ? std::string(message, end) : std::string(message, kMaxPluginMessage) + "...";
}

std::vector<std::string> capability_names(uint64_t capabilities) {
    static const std::pair<uint64_t, const char*> known[] = {
        {RUDDER_CAP_LOGIT_DELTA, "logit_delta"},
        {RUDDER_CAP_GRADIENT, "gradient"},
        {RUDDER_CAP_HARD_CONSTRAINT, "hard_constraint"},
        {RUDDER_CAP_NEEDS_FRESH_LOGITS, "needs_fresh_logits"},
        {RUDDER_CAP_EVALUATE, "evaluate"},
        {RUDDER_CAP_THREAD_SAFE, "thread_safe"},
        {RUDDER_CAP_ANY_DEVICE, "any_device"},
        {RUDDER_CAP_ROWS, "rows"},
        {RUDDER_CAP_PACKED_MASK, "packed_mask"},
        {RUDDER_CAP_CANDIDATES, "candidates"},
        {RUDDER_CAP_IGNORES_X0, "ignores_x0"},
        {RUDDER_CAP_COMMIT, "commit"},
    };
    std::vector<std::string> names;
    uint64_t unknown = capabilities;
    for (const auto& [bit, name] : known) {
        if ((capabilities & bit) != 0) names.emplace_back(name);
        unknown &= ~bit;
    }
    // Bits from a newer minor: show them rather than hide them.
    for (int bit = 0; bit < 64; ++bit)
        if ((unknown >> bit) & 1u) names.push_back("bit" + std::to_string(bit));
    return names;
}

namespace {
std::string text_or_empty(const char* text) { return text != nullptr ? std::string(text) : std::string(); }
}  // namespace

std::string ControllerType::id() const { return desc != nullptr ? text_or_empty(desc->id) : std::string(); }
std::string ControllerType::version() const { return desc != nullptr ? text_or_empty(desc->version) : std::string(); }
std::string ControllerType::description() const {
    return desc != nullptr ? text_or_empty(desc->description) : std::string();
}
std::string ControllerType::params_schema() const {
    return desc != nullptr ? text_or_empty(desc->params_schema_json) : std::string();
}
uint64_t ControllerType::capabilities() const { return desc != nullptr ? desc->capabilities : 0; }
uint32_t ControllerType::abi_major() const { return desc != nullptr ? desc->abi_major : 0; }
uint32_t ControllerType::abi_minor() const { return desc != nullptr ? desc->abi_minor : 0; }
std::string ControllerType::sha256() const { return library ? library->sha256() : std::string(); }

}  // namespace rudder::plugins
