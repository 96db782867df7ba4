#include "json_formats.hpp"

#include "regex_parser.hpp"

#include <cstdio>
#include <map>
#include <mutex>

namespace rudder::grammar {

namespace {

// RFC 3339 full-date with the days of each month, February 29 in leap years only (Gregorian: divisible by 4 and not
// by 100, or by 400; the year 0000 is one).
const char* const kDate =
    "[0-9]{4}-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])"
    "|[0-9]{4}-(0[469]|11)-(0[1-9]|[12][0-9]|30)"
    "|[0-9]{4}-02-(0[1-9]|1[0-9]|2[0-8])"
    "|([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29";
// RFC 3339 full-time without a leap second: partial-time, then Z, z or a numeric offset.
const char* const kTimeNoLeap =
    "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
const char* const kUuid = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
#define RUDDER_DEC_OCTET "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
const char* const kIpv4 = RUDDER_DEC_OCTET "(\\." RUDDER_DEC_OCTET "){3}";
// RFC 4291 / RFC 3986's IPv6address (h16 = 1 to 4 hex digits, ls32 = two h16 or an IPv4 address), no zone.
#define RUDDER_H16 "[0-9a-fA-F]{1,4}"
#define RUDDER_LS32 "(" RUDDER_H16 ":" RUDDER_H16 "|" RUDDER_DEC_OCTET "(\\." RUDDER_DEC_OCTET "){3})"
const char* const kIpv6 =
    "(" RUDDER_H16 ":){6}" RUDDER_LS32 "|::(" RUDDER_H16 ":){5}" RUDDER_LS32 "|(" RUDDER_H16 ")?::(" RUDDER_H16
    ":){4}" RUDDER_LS32 "|((" RUDDER_H16 ":){0,1}" RUDDER_H16 ")?::(" RUDDER_H16 ":){3}" RUDDER_LS32 "|((" RUDDER_H16
    ":){0,2}" RUDDER_H16 ")?::(" RUDDER_H16 ":){2}" RUDDER_LS32 "|((" RUDDER_H16 ":){0,3}" RUDDER_H16 ")?::" RUDDER_H16
    ":" RUDDER_LS32 "|((" RUDDER_H16 ":){0,4}" RUDDER_H16 ")?::" RUDDER_LS32 "|((" RUDDER_H16 ":){0,5}" RUDDER_H16
    ")?::" RUDDER_H16 "|((" RUDDER_H16 ":){0,6}" RUDDER_H16 ")?::";
// RFC 5321's Mailbox: a dot-atom or quoted-string local part, then a domain of LDH labels (each 1 to 63 characters,
// not starting or ending with '-') or an address literal ([IPv4] or [IPv6:...]).
const char* const kAtext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
const char* const kLabel = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";

std::string email_pattern() {
    const std::string atom = std::string(kAtext) + "+";
    const std::string local = atom + "(\\." + atom + ")*|\"([\\x20\\x21\\x23-\\x5B\\x5D-\\x7E]|\\\\[\\x20-\\x7E])*\"";
    const std::string domain =
        std::string(kLabel) + "(\\." + kLabel + ")*|\\[" + kIpv4 + "\\]|\\[IPv6:(" + kIpv6 + ")\\]";
    return "(" + local + ")@(" + domain + ")";
}

// RFC 3339 allows second 60 only at 23:59:60 UTC: the local time is 23:59 plus the offset. One branch per local
// time, each with the offsets (+ and -) that put it at 23:59 UTC.
LangPtr leap_second_times(bool every_offset) {
    std::map<int, std::vector<std::string>> offsets_by_local;  // minutes since midnight -> offsets
    for (int offset = 0; offset < (every_offset ? 24 * 60 : 1); ++offset) {
        char text[32];
        std::snprintf(text, sizeof text, "%02d:%02d", offset / 60, offset % 60);
        offsets_by_local[(23 * 60 + 59 + offset) % 1440].push_back(std::string("+") + text);
        offsets_by_local[(23 * 60 + 59 - offset + 1440) % 1440].push_back(std::string("-") + text);
    }
    offsets_by_local[23 * 60 + 59].push_back("Z");
    offsets_by_local[23 * 60 + 59].push_back("z");
    const LangPtr fraction = optional(sequence({literal("."), repeat(byte_range('0', '9'), 1, -1)}));
    std::vector<LangPtr> options;
    for (const auto& [local, offsets] : offsets_by_local) {
        char text[32];
        std::snprintf(text, sizeof text, "%02d:%02d:60", local / 60, local % 60);
        std::vector<LangPtr> endings;
        for (const auto& offset : offsets) endings.push_back(literal(offset));
        options.push_back(sequence({literal(text), fraction, choice(std::move(endings))}));
    }
    return choice(std::move(options));
}

LangPtr format_language(const std::string& name, bool exact_leap_seconds) {
    if (name == "date") return parse_regex(kDate, RegexDialect::pcre2);
    if (name == "time") {
        return choice({parse_regex(kTimeNoLeap, RegexDialect::pcre2), leap_second_times(exact_leap_seconds)});
    }
    if (name == "date-time") {
        return sequence({parse_regex(kDate, RegexDialect::pcre2), parse_regex("[Tt]", RegexDialect::pcre2),
                         format_language("time", exact_leap_seconds)});
    }
    if (name == "uuid") return parse_regex(kUuid, RegexDialect::pcre2);
    if (name == "ipv4") return parse_regex(kIpv4, RegexDialect::pcre2);
    if (name == "ipv6") return parse_regex(kIpv6, RegexDialect::pcre2);
    if (name == "email") return parse_regex(email_pattern(), RegexDialect::pcre2);
    return nullptr;
}

}  // namespace

std::string supported_formats() { return "date, time, date-time, uuid, ipv4, ipv6, email"; }

std::shared_ptr<const Dfa> format_automaton(const std::string& name, bool exact_leap_seconds) {
    static std::mutex mutex;
    static std::map<std::string, std::shared_ptr<const Dfa>> cache;
    std::lock_guard<std::mutex> lock(mutex);
    const std::string key = name + (exact_leap_seconds ? "/exact" : "");
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    const LangPtr lang = format_language(name, exact_leap_seconds);
    if (!lang) return nullptr;
    // Fixed limits: a format's automaton is the same whatever the schema's limits are.
    auto dfa = std::make_shared<const Dfa>(build_dfa(lang, CompileLimits{}, "the format '" + name + "'"));
    cache.emplace(key, dfa);
    return dfa;
}

}  // namespace rudder::grammar
