// The chat-template renderer: every Jinja feature case of jinja_cases.json against Python's Jinja2 as transformers
// sets it up (its "expected", written by jinja_cases_expected.py), and real chat templates (Llama 3's, which
// LLaDA's is; Qwen2.5's, which Dream's is; three more) against Hugging Face's renderer (chat_template_reference.mjs,
// fetched with the BPE references from npm). And the renderer under hostile templates: every problem a JinjaError,
// within its limits, on a small thread stack.
#include <rudder/text/chat_template.hpp>
#include <rudder/text/jinja.hpp>

#include <gtest/gtest.h>

#include <pthread.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

namespace {

using ordered_json = nlohmann::ordered_json;
namespace fs = std::filesystem;

ordered_json read_json(const fs::path& file) {
    std::ifstream in(file);
    EXPECT_TRUE(in) << "cannot read " << file;
    return ordered_json::parse(in);
}

TEST(Jinja, EveryFeatureCaseRendersAsPythonsJinja2) {
    const ordered_json cases = read_json(fs::path(RUDDER_SOURCE_DIR) / "tests/text/jinja_cases.json");
    ASSERT_GE(cases.size(), 30u);
    for (const auto& c : cases) {
        SCOPED_TRACE(c["name"].get<std::string>());
        const std::string source = c["template"];
        const ordered_json& expected = c["expected"];
        if (expected.is_object()) {  // Jinja2 refuses it: so must this renderer, when parsing or rendering
            EXPECT_THROW(rudder::JinjaTemplate(source).render(c["variables"]), rudder::JinjaError);
            continue;
        }
        try {
            EXPECT_EQ(rudder::JinjaTemplate(source).render(c["variables"]), expected.get<std::string>());
        } catch (const rudder::JinjaError& e) {
            ADD_FAILURE() << e.what();
        }
    }
}

TEST(Jinja, ProblemsNameTheirLine) {
    try {
        rudder::JinjaTemplate("line one\n{{ x }}\n{% if %}");
        FAIL() << "a bad template was parsed";
    } catch (const rudder::JinjaError& e) {
        EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
    }
    try {
        rudder::JinjaTemplate("a\n{{ raise_exception('roles must alternate') }}").render(ordered_json::object());
        FAIL() << "raise_exception did not raise";
    } catch (const rudder::JinjaError& e) {
        EXPECT_NE(std::string(e.what()).find("roles must alternate"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
    }
    EXPECT_THROW(rudder::JinjaTemplate("{{ 'a' + 1 }}").render(ordered_json::object()), rudder::JinjaError);
    EXPECT_THROW(rudder::JinjaTemplate("{{ x | no_such_filter }}").render(ordered_json::object()), rudder::JinjaError);
    EXPECT_THROW(rudder::JinjaTemplate("{{ 'unclosed }}"), rudder::JinjaError);
    EXPECT_THROW(rudder::JinjaTemplate("{% endfor %}"), rudder::JinjaError);
    EXPECT_THROW(rudder::JinjaTemplate("x").render(ordered_json::array()), rudder::JinjaError);
}

TEST(Jinja, StrftimeNowWritesTodaysDate) {
    char expected[64];
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    std::strftime(expected, sizeof expected, "%Y-%m-%d", &local);
    const std::string rendered = rudder::JinjaTemplate("{{ strftime_now('%Y-%m-%d') }}").render(ordered_json::object());
    if (rendered != expected) {  // midnight passed between the two
        std::time_t later = std::time(nullptr);
        localtime_r(&later, &local);
        std::strftime(expected, sizeof expected, "%Y-%m-%d", &local);
    }
    EXPECT_EQ(rendered, expected);
}

std::string render(const std::string& source, const ordered_json& variables = ordered_json::object(),
                   const rudder::RenderLimits& limits = rudder::RenderLimits()) {
    return rudder::JinjaTemplate(source).render(variables, limits);
}

// The message of the JinjaError that parsing and rendering `source` throws; "" (and a failure) when none is.
std::string error_of(const std::string& source, const ordered_json& variables = ordered_json::object(),
                     const rudder::RenderLimits& limits = rudder::RenderLimits()) {
    try {
        const std::string out = render(source, variables, limits);
        ADD_FAILURE() << "rendered without an error (" << out.size() << " bytes): " << source.substr(0, 200);
    } catch (const rudder::JinjaError& e) {
        const std::string what = e.what();
        EXPECT_EQ(what.find("internal error"), std::string::npos) << what;  // the safety net is not an answer
        EXPECT_EQ(what.find("json.exception"), std::string::npos) << what;
        return what;
    }
    return "";
}

std::string repeated(const std::string& s, int times) {
    std::string out;
    for (int k = 0; k < times; ++k) out += s;
    return out;
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

// `job` on a thread with a 512 KiB stack, what a server's connection thread may have: what passed the depth
// limits must render there, under AddressSanitizer too (its frames are larger), and what did not must fail cleanly.
void on_small_stack(const std::function<void()>& job) {
    pthread_attr_t attributes;
    ASSERT_EQ(pthread_attr_init(&attributes), 0);
    ASSERT_EQ(pthread_attr_setstacksize(&attributes, 512 * 1024), 0);
    pthread_t thread;
    auto* call = const_cast<std::function<void()>*>(&job);
    ASSERT_EQ(pthread_create(
                  &thread, &attributes,
                  [](void* p) -> void* {
                      (*static_cast<std::function<void()>*>(p))();
                      return nullptr;
                  },
                  call),
              0);
    pthread_join(thread, nullptr);
    pthread_attr_destroy(&attributes);
}

TEST(Jinja, IntegerArithmeticIsCheckedWithPythonsSemantics) {
    // INT64_MIN // -1 and % -1 trapped (SIGFPE) before.
    EXPECT_CONTAINS(error_of("{{ (-9223372036854775807 - 1) // -1 }}"), "integer overflow in '//'");
    EXPECT_EQ(render("{{ (-9223372036854775807 - 1) % -1 }}"), "0");
    // Floor division and a remainder with the divisor's sign.
    EXPECT_EQ(render("{{ 7 // -2 }} {{ 7 % -2 }} {{ -7 // 2 }} {{ -7 % 2 }} {{ -7 // -2 }} {{ -7 % -2 }}"),
              "-4 -1 -4 1 3 -1");
    EXPECT_CONTAINS(error_of("{{ 1 // 0 }}"), "by zero");
    EXPECT_CONTAINS(error_of("{{ 1 % 0 }}"), "by zero");
    EXPECT_CONTAINS(error_of("{{ 1.5 // 0 }}"), "by zero");
    EXPECT_CONTAINS(error_of("{{ 1 / 0 }}"), "by zero");
    // Past 64 bits: an error, never a wrapped number.
    EXPECT_CONTAINS(error_of("{{ 2 ** 63 }}"), "integer overflow in '**'");
    EXPECT_CONTAINS(error_of("{{ 10 ** 100 }}"), "integer overflow in '**'");
    EXPECT_EQ(render("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 0 ** 0 }} {{ 1 ** 9223372036854775807 }} {{ 2 ** -1 }}"),
              "4611686018427387904 -9223372036854775808 1 1 0.5");
    EXPECT_CONTAINS(error_of("{{ 9223372036854775807 + 1 }}"), "integer overflow in '+'");
    EXPECT_CONTAINS(error_of("{{ -9223372036854775807 - 2 }}"), "integer overflow in '-'");
    EXPECT_CONTAINS(error_of("{{ 4294967296 * 4294967296 }}"), "integer overflow in '*'");
    EXPECT_CONTAINS(error_of("{{ -(-9223372036854775807 - 1) }}"), "integer overflow in 'unary -'");
    EXPECT_CONTAINS(error_of("{{ (-9223372036854775807 - 1) | abs }}"), "integer overflow in 'abs'");
    EXPECT_EQ(render("{{ 9223372036854775806 + 1 }} {{ -3 | abs }}"), "9223372036854775807 3");
    EXPECT_CONTAINS(error_of("{{ 99999999999999999999 }}"), "too large");
    EXPECT_EQ(render("{{ " + repeated("9", 400) + ".5 }}"), "inf");  // std::stod threw std::out_of_range here
    EXPECT_EQ(render("{{ x is divisibleby(-1) }} {{ x is divisibleby 0 }}", {{"x", INT64_MIN}}), "True False");
    // int of what is past 64 bits is an error; Jinja2's int gives 0 for what is no number.
    EXPECT_CONTAINS(error_of("{{ x | int }}", {{"x", 1e300}}), "beyond 64 bits");
    EXPECT_CONTAINS(error_of("{{ '99999999999999999999' | int }}"), "beyond 64 bits");
    EXPECT_EQ(
        render("{{ 'nan' | int }} {{ 'abc' | int }} {{ ' 12 ' | int }} {{ '2.7' | int }} {{ x | int }}", {{"x", -2.5}}),
        "0 0 12 2 -2");
    // A JSON integer past INT64_MAX (unsigned) is written as it is, and refused in arithmetic.
    const ordered_json big = {{"u", UINT64_MAX}};
    EXPECT_EQ(render("{{ u }} {{ u | tojson }}", big), "18446744073709551615 18446744073709551615");
    EXPECT_CONTAINS(error_of("{{ u + 1 }}", big), "beyond 64 bits");
}

TEST(Jinja, NestingPastTheLimitsIsAnErrorNotAStackOverflow) {
    using rudder::kJinjaMaxBlockNesting;
    using rudder::kJinjaMaxExpressionDepth;
    const int deep = kJinjaMaxExpressionDepth - 4;  // within the limits, with room for the tags' own levels
    const std::string nested_ifs =
        repeated("{% if true %}", kJinjaMaxBlockNesting - 1) + "x" + repeated("{% endif %}", kJinjaMaxBlockNesting - 1);
    const std::string recursion =
        "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% else %}bottom{% endif %}{% endmacro %}{{ f(N) }}";
    const auto macro_calls = [&](int n) {
        std::string t = recursion;
        return t.replace(t.find('N'), 1, std::to_string(n));
    };
    on_small_stack([&] {
        // Within the limits: rendered, on a 512 KiB stack.
        EXPECT_EQ(render("{{ " + repeated("(", deep) + "1" + repeated(")", deep) + " }}"), "1");
        EXPECT_EQ(render("{{ " + repeated("[", deep) + repeated("]", deep) + " | length }}"), "1");
        EXPECT_EQ(render("{{ 1" + repeated(" + 1", deep) + " }}"), std::to_string(deep + 1));
        EXPECT_EQ(render("{{ x" + repeated(" | trim", deep) + " }}", {{"x", " a "}}), "a");
        EXPECT_EQ(render("{{ " + repeated("- ", deep) + "1 }}"), deep % 2 ? "-1" : "1");
        EXPECT_EQ(render(nested_ifs), "x");
        EXPECT_EQ(render(macro_calls(rudder::RenderLimits().max_call_depth - 1)), "bottom");
        // Past them (3,000 parentheses, 20,000 ifs and 5,000 macro calls overflowed the stack before).
        EXPECT_CONTAINS(error_of("{{ " + repeated("(", 3000) + "1" + repeated(")", 3000) + " }}"),
                        "an expression nested more than");
        EXPECT_CONTAINS(error_of("{{ " + repeated("[", 3000) + repeated("]", 3000) + " }}"),
                        "an expression nested more than");
        EXPECT_CONTAINS(error_of("{{ 1" + repeated("+1", 100000) + " }}"), "an expression nested more than");
        EXPECT_CONTAINS(error_of("{{ x" + repeated("|trim", 100000) + " }}"), "an expression nested more than");
        EXPECT_CONTAINS(error_of("{{ x" + repeated(".a", 100000) + " }}"), "an expression nested more than");
        EXPECT_CONTAINS(error_of("{{ " + repeated("not ", 100000) + "x }}"), "an expression nested more than");
        EXPECT_CONTAINS(error_of("{{ 1" + repeated(" if x else 1", 100000) + " }}"), "an expression nested more than");
        EXPECT_CONTAINS(error_of(repeated("{% if true %}", 20000) + repeated("{% endif %}", 20000)),
                        "blocks nested more than");
        EXPECT_CONTAINS(error_of(repeated("{% for x in y %}", 20000) + repeated("{% endfor %}", 20000)),
                        "blocks nested more than");
        EXPECT_CONTAINS(error_of(macro_calls(5000)), "macro calls nested more than");
        // A default that calls its own macro recursed without a call being counted (found by fuzz_jinja).
        EXPECT_CONTAINS(error_of("{% macro f(a=f()) %}{% endmacro %}{{ f() }}"), "macro calls nested more than");
        // Within the call depth, a macro whose every call nests blocks reaches the renderer's depth limit first.
        EXPECT_CONTAINS(error_of("{% macro f(n) %}" + repeated("{% if true %}", 40) + "{{ f(n - 1) if n > 0 }}" +
                                 repeated("{% endif %}", 40) + "{% endmacro %}{{ f(20) }}"),
                        "max_render_depth");
        // Values nested too deep, from the caller or built by the template, are refused before anything recurses
        // over them (copies, tojson, comparisons).
        // (Parsed, and moved into place: copying a JSON value recurses, as does an initializer list.)
        ordered_json deep_value = ordered_json::parse(repeated("[", 100000) + repeated("]", 100000));
        ordered_json variables = ordered_json::object();
        variables["x"] = std::move(deep_value);
        EXPECT_CONTAINS(error_of("{{ x | tojson }}", variables), "max_value_depth");
        deep_value = std::move(variables["x"]);
        EXPECT_THROW(rudder::ChatTemplate("{{ messages }}", ordered_json::object()).render(deep_value, true),
                     rudder::JinjaError);
        EXPECT_CONTAINS(error_of("{% set ns = namespace(x=1) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
                                 "{% endfor %}{{ ns.x | tojson }}"),
                        "max_value_depth");
        EXPECT_CONTAINS(error_of("{% set ns = namespace(x=1) %}{% for i in range(100000) %}{% set ns.x = {'a': ns.x} "
                                 "%}{% endfor %}{{ ns.x == ns }}"),
                        "max_value_depth");
        // A namespace set into itself doubles each time: refused by its depth or its size, whichever comes first.
        EXPECT_CONTAINS(error_of("{% set ns = namespace(a=1) %}{% for i in range(1000) %}{% set ns.me = ns %}"
                                 "{% endfor %}{{ ns | string }}{{ ns | tojson }}"),
                        "RenderLimits::max_value");
    });
    const ordered_json deep_value = ordered_json::parse(repeated("[", 1000000) + repeated("]", 1000000));
    EXPECT_TRUE(rudder::nests_deeper_than(deep_value, 999999));
    EXPECT_FALSE(rudder::nests_deeper_than(deep_value, 1000000));
    EXPECT_FALSE(rudder::nests_deeper_than(1, 0));
    EXPECT_TRUE(rudder::nests_deeper_than(ordered_json::object(), 0));
}

TEST(Jinja, RenderLimitsBoundTimeAndMemory) {
    // A million million iterations: stopped by the step count (before, a core was pinned for hours).
    EXPECT_CONTAINS(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
                    "RenderLimits::max_steps");
    // A string doubled in a namespace (8 GB in 10 s before).
    EXPECT_CONTAINS(error_of("{% set ns = namespace(s='a') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
                             "{% endfor %}{{ ns.s | length }}"),
                    "RenderLimits::max_value_bytes");
    EXPECT_CONTAINS(error_of("{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}"
                             "{% endfor %}"),
                    "RenderLimits::max_value_bytes");
    EXPECT_CONTAINS(error_of("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"),
                    "RenderLimits::max_output_bytes");
    EXPECT_CONTAINS(error_of("{% set s %}{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endset %}"),
                    "RenderLimits::max_value_bytes");
    EXPECT_CONTAINS(error_of("{{ 'a' * 10 ** 12 }}"), "RenderLimits::max_value_bytes");   // was cut at 16 MB
    EXPECT_EQ(render("{{ '' * 10 ** 12 }}|{{ 'ab' * -3 }}|{{ 3 * 'ab' }}"), "||ababab");  // '' looped 10**12 times
    EXPECT_CONTAINS(error_of("{{ range(100000) | join('x' * 1000) }}"), "RenderLimits::max_value_bytes");
    EXPECT_CONTAINS(error_of("{{ ('a' * 2000000).split('a') | length }}"), "RenderLimits::max_value_bytes");
    EXPECT_CONTAINS(error_of("{{ ('a' * 100000).replace('a', 'b' * 1000) }}"), "RenderLimits::max_value_bytes");
    EXPECT_CONTAINS(error_of("{{ 'a\nb' | indent(2000000000) }}"), "RenderLimits::max_value_bytes");
    EXPECT_CONTAINS(error_of("{{ [1, [2, [3]]] | tojson(indent=100000000) }}"), "RenderLimits::max_value_bytes");
    // json.dumps with a negative indent: newlines, no spaces (the indent times the level was a huge size before).
    EXPECT_EQ(render("{{ [1, [2]] | tojson(indent=-3) }}"), "[\n1,\n[\n2\n]\n]");
    // range(): Jinja2's sandbox bound, a step of 0, and the ends of int64 (i += step wrapped before).
    EXPECT_CONTAINS(error_of("{{ range(10 ** 12) | length }}"), "range() of more than 100000");
    EXPECT_CONTAINS(error_of("{{ range(0, 10, 0) }}"), "step of 0");
    EXPECT_EQ(
        render("{{ range(9223372036854775800, 9223372036854775807, 5) | list }} "
               "{{ range(-9223372036854775807 - 1, -9223372036854775807, 7) | list }} {{ range(5, 0, -2) | list }}"),
        "[9223372036854775800, 9223372036854775805] [-9223372036854775808] [5, 3, 1]");
    // Slices with steps at the ends of int64 (k += step wrapped and indexed out of bounds before).
    EXPECT_EQ(render("{{ 'abcdef'[1::9223372036854775807] }} {{ 'abcdef'[::-9223372036854775807 - 1] }} "
                     "{{ [1, 2, 3][::-1] }} {{ 'abc'[-100:100] }} {{ 'abc'[-9223372036854775807 - 1:] }} "
                     "{{ 'héllo'[1:4] }} {{ 'héllo'[::-2] }}"),
              "b f [3, 2, 1] abc abc éll olh");
    EXPECT_CONTAINS(error_of("{{ 'abc'[::0] }}"), "step of 0");
    // Small limits of the caller's.
    rudder::RenderLimits small;
    small.max_steps = 2000;
    EXPECT_EQ(render("{% for i in range(10) %}{{ i }}{% endfor %}", ordered_json::object(), small), "0123456789");
    EXPECT_CONTAINS(error_of("{% for i in range(10000) %}{{ i }}{% endfor %}", ordered_json::object(), small),
                    "2000 steps");
    small = rudder::RenderLimits();
    small.max_output_bytes = 10;
    EXPECT_EQ(render("{{ 'x' * 10 }}", ordered_json::object(), small), "xxxxxxxxxx");
    EXPECT_CONTAINS(error_of("{{ 'x' * 11 }}", ordered_json::object(), small), "max_output_bytes");
    small = rudder::RenderLimits();
    small.max_value_bytes = 1000;
    EXPECT_CONTAINS(error_of("{{ x }}", {{"x", std::string(2000, 'a')}}, small), "max_value_bytes");
    // Cancellation, polled as the render goes: a server's deadline or drain.
    int polls = 0;
    small = rudder::RenderLimits();
    small.cancelled = [&polls] { return ++polls > 3; };
    EXPECT_CONTAINS(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                             ordered_json::object(), small),
                    "cancelled");
    EXPECT_EQ(polls, 4);
    polls = 0;
    EXPECT_EQ(render("{{ 'short' }}", ordered_json::object(), small), "short");  // too short to be asked
    // What ChatTemplate::render passes on.
    rudder::ChatTemplate chat("{% for m in messages %}{% for i in range(100000) %}{% endfor %}{% endfor %}",
                              ordered_json::object());
    rudder::RenderLimits few;
    few.max_steps = 1000;
    EXPECT_THROW(
        chat.render(ordered_json::array({{{"role", "user"}, {"content", "hi"}}}), true, ordered_json::object(), few),
        rudder::JinjaError);
}

TEST(Jinja, EveryTemplateErrorIsAJinjaError) {
    // Each threw a JSON library's type error, a std::invalid_argument or std::out_of_range, or a std::length_error
    // before; each is a JinjaError naming what is wrong now.
    for (const char* source : {"{{ 'a' | trim(1) }}",
                               "{{ 'a'.split(1) }}",
                               "{{ 'a b'.split(' ', 'x') }}",
                               "{{ [1] | join(1) }}",
                               "{{ 'a'.startswith(1) }}",
                               "{{ 'a'.endswith([1]) }}",
                               "{{ 'a' | round }}",
                               "{{ 1.5 | round('x') }}",
                               "{{ 'a' | indent('x') }}",
                               "{{ '\\uZZZZ' }}",
                               "{{ '\\u12' }}",
                               "{{ 'a'.replace(1, 2) }}",
                               "{{ [{'a': 1}] | selectattr(1) | list }}",
                               "{{ [1] | select(1) | list }}",
                               "{{ range('a') }}",
                               "{{ 'abc'[1:'x'] }}",
                               "{{ 'a'.count(1) }}",
                               "{{ 'a'.find(1) }}",
                               "{{ strftime_now(1) }}",
                               "{{ [1] | tojson(indent='x') }}",
                               "{{ 'a' | int | string | length + 'x' }}",
                               "{{ loop.cycle('a', 'b') }}",
                               "{% for x in range(3) %}{{ loop.cycle('a', 'b') }}{% endfor %}",
                               "{{ x() }}",
                               "{{ (1, 2) < (1, 3) }}",
                               "{% for a, b in [1, 2] %}{% endfor %}",
                               "{% set x.y = 1 %}",
                               "{{ 1 | unique }}",
                               "{{ {1: 2} }}",
                               "{{ 'a' ~ raise_exception('refused') }}"}) {
        SCOPED_TRACE(source);
        error_of(source, {{"x", 1}});
    }
    // Still rendered as before: the checked reads take what they took.
    EXPECT_EQ(render("{{ 1 | default(2, boolean=true) }} {{ 0 | default(2, true) }} {{ [3, 1] | join(', ') }}"),
              "1 2 3, 1");
    // `loop` is read in place, and built as a dict only where it is used whole.
    EXPECT_EQ(render("{% for x in 'ab' %}{{ loop.index }}{{ loop.revindex0 }}{{ loop.previtem }}{{ loop.last }} "
                     "{% endfor %}{% for x in [7] %}{{ loop | tojson }}{% set l = loop %}{{ l.length }}{% endfor %}"),
              "11NoneFalse 20aTrue {\"index\": 1, \"index0\": 0, \"first\": true, \"last\": true, \"length\": 1, "
              "\"revindex\": 1, \"revindex0\": 0, \"previtem\": null, \"nextitem\": null}1");
}

TEST(ChatTemplate, LoadsTheTemplateAndSpecialTokensOfAFolder) {
    const fs::path dir = fs::temp_directory_path() / ("rudder_chat_template_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    EXPECT_FALSE(rudder::ChatTemplate::load(dir)) << "no tokenizer_config.json: no template";
    const auto write = [&](const std::string& text) { std::ofstream(dir / "tokenizer_config.json") << text; };
    write(R"({"eos_token": "</s>"})");
    EXPECT_FALSE(rudder::ChatTemplate::load(dir)) << "no chat_template: no template";
    write(R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
              "chat_template": [{"name": "tool_use", "template": "tools"},
                                {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"}]})");
    const auto chat = rudder::ChatTemplate::load(dir);
    ASSERT_TRUE(chat);
    EXPECT_EQ(chat->end_of_turn(), "</s>");
    const ordered_json messages = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
    EXPECT_EQ(chat->render(messages, true), "<s>user: hi</s>assistant:");
    EXPECT_EQ(chat->render(messages, false), "<s>user: hi</s>");
    EXPECT_EQ(chat->render(messages, false, {{"eos_token", "|"}}), "<s>user: hi|") << "extra variables win";
    write("{not json");
    try {
        rudder::ChatTemplate::load(dir);
        ADD_FAILURE() << "bad JSON was read";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos) << e.what();
    }
    write(R"({"chat_template": "{% if %}"})");
    EXPECT_THROW(rudder::ChatTemplate::load(dir), std::runtime_error);
    write(R"({"chat_template": [{"name": "tool_use", "template": "x"}]})");
    EXPECT_THROW(rudder::ChatTemplate::load(dir), std::runtime_error);
    fs::remove_all(dir);
}

TEST(ChatTemplate, ThePlainFormatJoinsTheContents) {
    const ordered_json messages = ordered_json::parse(
        R"([{"role": "system", "content": "The Eagle"}, {"role": "user", "content": ""},
            {"role": "user", "content": "is a pub"}])");
    EXPECT_EQ(rudder::plain_chat_prompt(messages), "The Eagle is a pub");
    EXPECT_EQ(rudder::plain_chat_prompt(ordered_json::array()), "");
}

TEST(ChatTemplate, RealTemplatesRenderAsHuggingFacesRenderer) {
    const char* dir = std::getenv("RUDDER_BPE_REFERENCE_DIR");
    const fs::path file = fs::path(dir != nullptr ? dir : "") / "chat_templates.json";
    if (dir == nullptr || !fs::exists(file))
        GTEST_SKIP() << "no " << file << " (tests/text/fetch_bpe_reference.sh writes it from npm)";
    const ordered_json cases = read_json(file);
    ASSERT_GE(cases.size(), 50u);
    int rendered = 0;
    for (const auto& c : cases) {
        SCOPED_TRACE(c["name"].get<std::string>());
        const auto chat = rudder::ChatTemplate::load(c["model_dir"].get<std::string>());
        ASSERT_TRUE(chat);
        const ordered_json& v = c["variables"];
        if (c.contains("error")) {
            EXPECT_THROW(chat->render(v["messages"], v["add_generation_prompt"], v), rudder::JinjaError);
            continue;
        }
        try {
            EXPECT_EQ(chat->render(v["messages"], v["add_generation_prompt"], v), c["output"].get<std::string>());
            ++rendered;
        } catch (const rudder::JinjaError& e) {
            ADD_FAILURE() << e.what();
        }
    }
    EXPECT_GE(rendered, 50);
}

}  // namespace
