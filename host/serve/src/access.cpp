#include "access.hpp"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "answers.hpp"
#include "http_transport.hpp"

namespace rudder::serve {
namespace {

// Equal strings, in a time that does not depend on where they differ.
bool same_secret(const std::string& given, const std::string& key) {
    if (given.size() != key.size()) return false;
    unsigned char difference = 0;
    for (size_t i = 0; i < key.size(); ++i)
        difference |= static_cast<unsigned char>(given[i]) ^ static_cast<unsigned char>(key[i]);
    return difference == 0;
}

void refuse(httplib::Response& res, int status, const std::string& message) {
    res.status = status;
    res.set_header("Connection", "close");
    res.set_content(dump_json({{"error", message}}) + "\n", "application/json");
    HttpServer::close_after_this_request();  // the body, if any, is not read
}

}  // namespace

Access::Access(std::vector<std::string> api_keys, std::vector<std::string> cors_origins)
    : keys_(std::move(api_keys)), origins_(std::move(cors_origins)) {}

bool Access::key_valid(const httplib::Request& req) const {
    const std::string header = req.get_header_value("Authorization");
    constexpr size_t kScheme = 7;  // "Bearer "
    if (header.size() <= kScheme) return false;
    std::string scheme = header.substr(0, kScheme);
    std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
    if (scheme != "bearer ") return false;
    const std::string given = header.substr(kScheme);
    bool valid = false;
    for (const auto& key : keys_) valid = same_secret(given, key) || valid;  // every key compared
    return valid;
}

bool Access::origin_allowed(const httplib::Request& req, const std::string& origin) const {
    if (std::find(origins_.begin(), origins_.end(), "*") != origins_.end()) return true;
    if (std::find(origins_.begin(), origins_.end(), origin) != origins_.end()) return true;
    const std::string host = req.get_header_value("Host");
    return !host.empty() && (origin == "http://" + host || origin == "https://" + host);
}

bool Access::answered(const httplib::Request& req, httplib::Response& res) const {
    const std::string origin = req.get_header_value("Origin");
    // A page of another origin: a browser sends its request (a "simple" POST needs no preflight) and only hides the
    // answer, so the request itself is refused unless the operator allowed that origin.
    if (!origin.empty() && req.path != "/healthz" && !origin_allowed(req, origin)) {
        refuse(res, 403,
               "requests from pages of origin '" + quoted(origin) + "' are not allowed by this server (--cors-origin)");
        return true;
    }
    if (req.method == "OPTIONS") {
        res.status = 204;
        res.set_header("Allow", "GET, POST, OPTIONS");
        if (!origin.empty()) {
            decorate(req, res);
            res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
            res.set_header("Access-Control-Max-Age", "600");
        }
        return true;
    }
    if (!keys_.empty() && req.path != "/healthz" && req.path != "/" && !key_valid(req)) {
        res.set_header("WWW-Authenticate", "Bearer");
        refuse(res, 401,
               req.has_header("Authorization") ? "the API key is not valid"
                                               : "this server needs an API key: Authorization: Bearer KEY");
        return true;
    }
    return false;
}

void Access::decorate(const httplib::Request& req, httplib::Response& res) const {
    const std::string origin = req.get_header_value("Origin");
    if (origin.empty() || origins_.empty() || res.has_header("Access-Control-Allow-Origin")) return;
    const bool any = std::find(origins_.begin(), origins_.end(), "*") != origins_.end();
    if (!any && std::find(origins_.begin(), origins_.end(), origin) == origins_.end()) return;
    res.set_header("Access-Control-Allow-Origin", any ? std::string("*") : origin);
    res.set_header("Vary", "Origin");
}

}  // namespace rudder::serve
