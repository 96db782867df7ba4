#include "access.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>

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

std::string lower(std::string text) {
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return text;
}

// A Host header's name: "name:port" -> "name", "[::1]:8080" -> "::1", lower case.
std::string host_name(const std::string& header) {
    if (!header.empty() && header[0] == '[') {
        const size_t end = header.find(']');
        return end == std::string::npos ? std::string() : lower(header.substr(1, end - 1));
    }
    return lower(header.substr(0, header.find(':')));
}

// Names that only ever reach this machine: localhost and its subdomains (which browsers resolve to loopback
// themselves, RFC 6761), 127.0.0.0/8 written as a dotted quad, and ::1.
bool is_loopback_name(const std::string& name) {
    static const std::string suffix = ".localhost";
    if (name == "localhost" || name == "::1") return true;
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        return true;
    int parts[4];
    char tail = 0;
    if (std::sscanf(name.c_str(), "%d.%d.%d.%d%c", &parts[0], &parts[1], &parts[2], &parts[3], &tail) != 4)
        return false;
    for (int part : parts)
        if (part < 0 || part > 255) return false;
    return parts[0] == 127 && name.find_first_not_of("0123456789.") == std::string::npos;
}

}  // namespace

Access::Access(std::vector<std::string> api_keys, std::vector<std::string> cors_origins,
               std::vector<std::string> allowed_hosts, std::string listen_host)
    : keys_(std::move(api_keys)), origins_(std::move(cors_origins)), hosts_(std::move(allowed_hosts)),
      listen_host_(host_name(listen_host.find(':') != std::string::npos && listen_host[0] != '['
                                 ? "[" + listen_host + "]"  // an IPv6 address given bare
                                 : listen_host)) {
    for (auto& host : hosts_) host = host == "*" ? host : host_name(host);
}

bool Access::host_allowed(const httplib::Request& req) const {
    if (!keys_.empty()) return true;           // a page cannot bring the key
    if (!req.has_header("Host")) return true;  // not a browser: every browser sends one
    const std::string name = host_name(req.get_header_value("Host"));
    if (is_loopback_name(name)) return true;
    // A wildcard address accepts connections on every address, but names none of them.
    if (!name.empty() && name == listen_host_ && listen_host_ != "0.0.0.0" && listen_host_ != "::") return true;
    for (const auto& host : hosts_)
        if (host == "*" || host == name) return true;
    return false;
}

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
    if (req.path != "/healthz" && !host_allowed(req)) {
        refuse(res, 421,
               "this server does not answer to the name '" + quoted(host_name(req.get_header_value("Host"))) +
                   "' (a server without API keys answers to localhost and the names given with --allowed-host)");
        return true;
    }
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
