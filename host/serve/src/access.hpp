// Who may call the server: API keys (`Authorization: Bearer KEY`, as OpenAI-compatible servers take them), and which
// web pages may (CORS). /healthz is always open, for probes; so is the playground page, which holds no data.
#pragma once

#include <httplib.h>

#include <string>
#include <vector>

namespace rudder::serve {

class Access {
public:
    // No keys: no authentication. No origins: no page of another origin may call the API; "*": any may.
    Access(std::vector<std::string> api_keys, std::vector<std::string> cors_origins);

    // Before routing: true when the request has been answered here (a CORS preflight, 401 without a valid key,
    // 403 from a page of an origin not allowed), its body unread.
    bool answered(const httplib::Request& req, httplib::Response& res) const;
    // After routing: the CORS headers of an answer to an allowed origin.
    void decorate(const httplib::Request& req, httplib::Response& res) const;

private:
    bool key_valid(const httplib::Request& req) const;
    // The page's origin when it may call the API: one of the allowed, or the server's own (the playground).
    bool origin_allowed(const httplib::Request& req, const std::string& origin) const;

    std::vector<std::string> keys_;
    std::vector<std::string> origins_;
};

}  // namespace rudder::serve
