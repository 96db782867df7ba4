#include <rudder/base/paths.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

// The build writes the install layout (relative to the prefix) in: see the top-level CMakeLists.txt.
#if !defined(RUDDER_INSTALL_BINDIR) || !defined(RUDDER_INSTALL_LIBDIR) || !defined(RUDDER_INSTALL_DATADIR) || \
    !defined(RUDDER_INSTALL_LIBEXECDIR)
#error "RUDDER_INSTALL_BINDIR, _LIBDIR, _DATADIR and _LIBEXECDIR must be defined by the build"
#endif

namespace rudder {
namespace fs = std::filesystem;

namespace {

// The file (executable or shared library) that this function was linked into.
fs::path this_module_file() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<const void*>(&this_module_file), &info) == 0 || info.dli_fname == nullptr ||
        info.dli_fname[0] == '\0')
        return {};
    std::error_code ec;
    const fs::path file = fs::canonical(info.dli_fname, ec);
    return ec ? fs::path() : file;
}

// `dir` with one ".." per component of `relative` (e.g. lib/x86_64-linux-gnu -> two levels up).
fs::path up_by(fs::path dir, const fs::path& relative) {
    for (const auto& part : relative)
        if (!part.empty() && part != ".") dir = dir.parent_path();
    return dir;
}

// Whether `dir`'s last components are `tail`'s.
bool ends_with(const fs::path& dir, const fs::path& tail) {
    std::vector<fs::path> a(dir.begin(), dir.end()), b(tail.begin(), tail.end());
    while (!a.empty() && a.back().empty()) a.pop_back();
    while (!b.empty() && b.back().empty()) b.pop_back();
    return b.size() <= a.size() && std::equal(b.rbegin(), b.rend(), a.rbegin());
}

}  // namespace

fs::path executable_dir() {
    std::error_code ec;
    const auto exe = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::current_path() : exe.parent_path();
}

fs::path install_prefix() {
    const fs::path exe_dir = executable_dir();
    const fs::path module = this_module_file();
    std::error_code ec;
    // In the main program dladdr may name it by argv[0]; anything that is not the executable is librudder.so. A
    // helper program of the command line lives in <prefix>/<libexecdir>/rudder, the rudder command in
    // <prefix>/<bindir>.
    if (module.empty() || fs::equivalent(module, fs::path("/proc/self/exe"), ec)) {
        const fs::path helpers = fs::path(RUDDER_INSTALL_LIBEXECDIR) / "rudder";
        return ends_with(exe_dir, helpers) ? up_by(exe_dir, helpers) : up_by(exe_dir, RUDDER_INSTALL_BINDIR);
    }
    return up_by(module.parent_path(), RUDDER_INSTALL_LIBDIR);
}

fs::path bundled_plugin_dir() { return install_prefix() / RUDDER_INSTALL_LIBDIR / "rudder" / "plugins"; }
fs::path bundled_model_dir() { return install_prefix() / RUDDER_INSTALL_DATADIR / "rudder" / "models"; }
fs::path python_package_dir() { return install_prefix() / RUDDER_INSTALL_LIBDIR / "rudder" / "python"; }

fs::path plugin_scanner_file() {
    if (const char* file = std::getenv("RUDDER_PLUGIN_SCANNER"); file != nullptr && *file != '\0') return file;
    return install_prefix() / RUDDER_INSTALL_LIBEXECDIR / "rudder" / "rudder-plugin-scan";
}

fs::path controller_host_file() {
    if (const char* file = std::getenv("RUDDER_CONTROLLER_HOST"); file != nullptr && *file != '\0') return file;
    return install_prefix() / RUDDER_INSTALL_LIBEXECDIR / "rudder" / "rudder-controller-host";
}

fs::path helper_program_file(const std::string& name) {
    return install_prefix() / RUDDER_INSTALL_LIBEXECDIR / "rudder" / ("rudder-" + name);
}

fs::path user_cache_dir() {
    if (const char* dir = std::getenv("RUDDER_CACHE_DIR")) return dir;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && fs::path(xdg).is_absolute())
        return fs::path(xdg) / "rudder";
    if (const char* home = std::getenv("HOME"); home != nullptr && fs::path(home).is_absolute())
        return fs::path(home) / ".cache" / "rudder";
    return {};
}

std::vector<fs::path> split_path_list(const char* list) {
    std::vector<fs::path> out;
    if (list == nullptr) return out;
    std::stringstream in{std::string(list)};
    std::string item;
    while (std::getline(in, item, ':')) {
        if (!item.empty()) out.emplace_back(item);
    }
    return out;
}

}  // namespace rudder
