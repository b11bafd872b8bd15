// Where a chat template comes from (tokenizer_config.json as a string or a named list,
// chat_template.jinja, a file, the default) and `retnet chat-template` end to end.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_runner.h"
#include "retnet/core/error.h"
#include "retnet/text/chat_template.h"
#include "test_helpers.h"

namespace fs = std::filesystem;
using retnet::load_chat_template;

namespace {

class ChatTemplateLoading : public ::testing::Test {
 protected:
  void SetUp() override { dir = retnet::test::fresh_temp_dir("chat_template"); }
  void TearDown() override { fs::remove_all(dir); }
  void config(const std::string& text) const { retnet::test::write_file(dir / "tokenizer_config.json", text); }
  fs::path dir;
};

TEST_F(ChatTemplateLoading, StringTemplateAndAddedTokenObjects) {
  config(R"({"chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}",
             "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
             "eos_token": "</s>"})");
  const auto src = load_chat_template(dir.string());
  EXPECT_EQ(src.bos_token, "<s>");
  EXPECT_EQ(src.eos_token, "</s>");
  EXPECT_NE(src.origin.find("tokenizer_config.json"), std::string::npos);
  const auto t = retnet::ChatTemplate::parse(src.source, src.origin);
  EXPECT_EQ(retnet::apply_chat_template(t, nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"}])"), false,
                                        src.bos_token, src.eos_token),
            "<s>x</s>");
}

TEST_F(ChatTemplateLoading, NamedListTakesDefault) {
  config(R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  EXPECT_EQ(load_chat_template(dir.string()).source, "D");
  config(R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "rag", "template": "R"}]})");
  try {
    load_chat_template(dir.string());
    FAIL() << "no error";
  } catch (const retnet::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no template named 'default' (it has: tool_use, rag)"), std::string::npos) << e.what();
  }
  config(R"({"chat_template": 5})");
  EXPECT_THROW(load_chat_template(dir.string()), retnet::Error);
  config(R"({"chat_template": "x", "bos_token": 3})");
  EXPECT_THROW(load_chat_template(dir.string()), retnet::Error);
  config("{not json");
  EXPECT_THROW(load_chat_template(dir.string()), retnet::Error);
}

TEST_F(ChatTemplateLoading, FallbacksAndOverride) {
  config(R"({"eos_token": "</s>"})");
  EXPECT_EQ(load_chat_template(dir.string()).source, retnet::default_chat_template());
  retnet::test::write_file(dir / "chat_template.jinja", "J");
  EXPECT_EQ(load_chat_template(dir.string()).source, "J");
  const std::string file = retnet::test::write_file(dir / "mine.jinja", "M");
  const auto src = load_chat_template(dir.string(), file);
  EXPECT_EQ(src.source, "M");
  EXPECT_EQ(src.eos_token, "</s>");  // the override keeps the directory's tokens
  EXPECT_EQ(load_chat_template("", file).source, "M");
  EXPECT_EQ(load_chat_template("").source, retnet::default_chat_template());
  EXPECT_THROW(load_chat_template("", (dir / "missing.jinja").string()), retnet::Error);
}

TEST_F(ChatTemplateLoading, CliRendersAndFailsCleanly) {
  config(R"({"chat_template": "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}{{ tools | length }}",
             "eos_token": "</s>"})");
  const std::string msgs = retnet::test::write_file(
      dir / "chat.json", R"({"messages": [{"role": "user", "content": "Grüße"}], "tools": [1, 2]})");
  auto r = retnet::test::run_retnet("chat-template -m " + dir.string() + " --messages " + msgs + " --add-generation-prompt");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[user] Grüße\n[assistant] 2");
  // The default template, with a plain list of messages.
  const std::string list = retnet::test::write_file(dir / "list.json", R"([{"role": "user", "content": "Hi"}])");
  r = retnet::test::run_retnet("chat-template --messages " + list);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<|user|>\nHi<|end|>\n");
  const std::string bad = retnet::test::write_file(dir / "bad.jinja", "a\n{% if x %}");
  EXPECT_TRUE(retnet::test::fails_cleanly(retnet::test::run_retnet("chat-template --template " + bad + " --messages " + list),
                                          "bad.jinja:2:11: unexpected end of template"));
  const std::string raising = retnet::test::write_file(dir / "raise.jinja", "{{ raise_exception('no system role') }}");
  EXPECT_TRUE(retnet::test::fails_cleanly(retnet::test::run_retnet("chat-template --template " + raising + " --messages " + list),
                                          "raise_exception: no system role"));
  const std::string not_json = retnet::test::write_file(dir / "x.json", "[{");
  EXPECT_TRUE(retnet::test::fails_cleanly(retnet::test::run_retnet("chat-template --messages " + not_json), "not valid JSON"));
  const std::string no_messages = retnet::test::write_file(dir / "y.json", R"({"msgs": []})");
  EXPECT_TRUE(retnet::test::fails_cleanly(retnet::test::run_retnet("chat-template --messages " + no_messages), "\"messages\""));
}

TEST_F(ChatTemplateLoading, CliNamesBadMessages) {
  const auto fails = [&](const std::string& name, const std::string& text,
                         const std::string& expected) {
    const std::string file = retnet::test::write_file(dir / name, text);
    return retnet::test::fails_cleanly(retnet::test::run_retnet("chat-template --messages " + file),
                                       expected);
  };
  EXPECT_TRUE(fails("number.json", R"([{"role": "user", "content": 5}])",
                    "messages[0].content must be a string, a list of parts or null, got number"));
  EXPECT_TRUE(fails("role.json", R"({"messages": [{"role": ["user"], "content": "a"}]})",
                    "messages[0].role must be a string, got array"));
  EXPECT_TRUE(fails("utf8.json", "[{\"role\": \"user\", \"content\": \"a\xff\"}]", "utf8.json"));
  std::string deep = "[{\"role\": \"user\", \"content\": \"a\", \"x\": ";
  deep += std::string(1000, '[') + std::string(1000, ']') + "}]";
  EXPECT_TRUE(fails("deep.json", deep, "nested deeper than"));
  // A template whose output outgrows the render's limit ends in an Error naming it.
  const std::string list =
      retnet::test::write_file(dir / "ok.json", R"([{"role": "user", "content": "Hi"}])");
  const std::string big = retnet::test::write_file(dir / "big.jinja", "{{ 'x' * 100000000 }}");
  EXPECT_TRUE(retnet::test::fails_cleanly(
      retnet::test::run_retnet("chat-template --template " + big + " --messages " + list),
      "big.jinja"));
}

}  // namespace
