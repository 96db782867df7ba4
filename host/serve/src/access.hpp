// Who may call the server: API keys (`Authorization: Bearer KEY`, as OpenAI-compatible servers take them), and which
// web pages may (CORS), and, on a server without keys, which names it answers to (the Host header: a page whose name
// an attacker rebinds to 127.0.0.1 is of the same origin as the server to the browser, so CORS does not stop it).
// /healthz is always open, for probes; so is the playground page, which holds no data.
#pragma once

#include <httplib.h>

#include <string>
#include <vector>

namespace rudder::serve {

class Access {
public:
    // No keys: no authentication. No origins: no page of another origin may call the API; "*": any may. Hosts: the
    // names a keyless server answers to besides the loopback ones and `listen_host` ("*": any).
    Access(std::vector<std::string> api_keys, std::vector<std::string> cors_origins,
           std::vector<std::string> allowed_hosts, std::string listen_host);

    // Before routing: true when the request has been answered here (a CORS preflight, 401 without a valid key,
    // 403 from a page of an origin not allowed, 421 for a name a keyless server does not answer to), its body unread.
    bool answered(const httplib::Request& req, httplib::Response& res) const;
    // After routing: the CORS headers of an answer to an allowed origin.
    void decorate(const httplib::Request& req, httplib::Response& res) const;

private:
    bool key_valid(const httplib::Request& req) const;
    // The page's origin when it may call the API: one of the allowed, or the server's own (the playground).
    bool origin_allowed(const httplib::Request& req, const std::string& origin) const;
    // The Host header's name (without its port) is one this server answers to.
    bool host_allowed(const httplib::Request& req) const;

    std::vector<std::string> keys_;
    std::vector<std::string> origins_;
    std::vector<std::string> hosts_;
    std::string listen_host_;
};

}  // namespace rudder::serve
