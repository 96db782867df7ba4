// The chat-template renderer: every Jinja feature case of jinja_cases.json against Python's Jinja2 as transformers
// sets it up (its "expected", written by jinja_cases_expected.py), and real chat templates (Llama 3's, which
// LLaDA's is; Qwen2.5's, which Dream's is; three more) against Hugging Face's renderer (chat_template_reference.mjs,
// fetched with the BPE references from npm).
#include <rudder/text/chat_template.hpp>
#include <rudder/text/jinja.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
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
