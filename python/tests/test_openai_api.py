"""Model.create_completion / create_chat_completion: OpenAI-shaped dicts (llama-cpp-python's
convention), the same text as generate and chat for a seed, streams of chunk dicts, and every
field read or refused by name."""
import json

import pytest

import retnet

MESSAGES = [{"role": "user", "content": "Hi!"}]
ENVELOPE = {"id", "object", "created", "model", "seed", "choices", "usage"}


def test_completion_is_generate_in_openai_shape(model):
    out = model.create_completion("Once", max_tokens=6, seed=4, temperature=1.2, model="mine")
    same = model.generate("Once", max_tokens=6, seed=4, temperature=1.2)
    assert set(out) == ENVELOPE
    assert out["object"] == "text_completion" and out["id"].startswith("cmpl-")
    assert out["model"] == "mine" and out["seed"] == 4 and isinstance(out["created"], int)
    assert out["choices"] == [{"index": 0, "text": same.text, "logprobs": None,
                               "finish_reason": "length"}]
    assert out["usage"] == same.usage
    json.dumps(out)  # plain JSON values only


def test_calling_the_model_is_create_completion(model):
    assert model("Once", max_tokens=5, seed=2)["choices"] == \
        model.create_completion("Once", max_tokens=5, seed=2)["choices"]


def test_completion_defaults_and_prompt_forms(model):
    out = model.create_completion("Once", seed=1)
    assert out["usage"]["completion_tokens"] <= 16  # llama-cpp-python's and OpenAI's default
    ids = model.tokenizer.encode("Once")
    by_ids = model.create_completion(ids, max_tokens=5, seed=2)
    assert by_ids["choices"][0]["text"] == model.generate(ids, max_tokens=5, seed=2).text
    in_list = model.create_completion(["Once"], max_tokens=5, seed=2)
    assert in_list["choices"][0]["text"] == model.generate("Once", max_tokens=5, seed=2).text
    # A seed is picked and reported when none is given, so the reply can be reproduced.
    again = model.create_completion("Once", max_tokens=5, seed=model.create_completion(
        "Once", max_tokens=5)["seed"])
    assert isinstance(again["seed"], int)


def test_completion_stream_chunks(model):
    chunks = list(model.create_completion("Once", max_tokens=8, seed=4, stream=True,
                                          stream_options={"include_usage": True}))
    whole = model.create_completion("Once", max_tokens=8, seed=4)
    assert all(c["object"] == "text_completion" and c["id"] == chunks[0]["id"] for c in chunks)
    texts = [c["choices"][0]["text"] for c in chunks[:-1]]
    assert "".join(texts) == whole["choices"][0]["text"]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]][-1] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]


def test_chat_completion_is_chat_in_openai_shape(model):
    out = model.create_chat_completion(MESSAGES, max_tokens=6, seed=9, temperature=1.3)
    same = model.chat(MESSAGES, max_tokens=6, seed=9, temperature=1.3)
    assert set(out) == ENVELOPE
    assert out["object"] == "chat.completion" and out["id"].startswith("chatcmpl-")
    assert out["choices"] == [{"index": 0, "message": {"role": "assistant", "content": same.text},
                               "logprobs": None, "finish_reason": "length"}]
    assert out["usage"] == same.usage
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi"},
                                          {"type": "text", "text": "!"}]}]
    assert model.create_chat_completion(parts, max_completion_tokens=6, seed=9,
                                        temperature=1.3)["choices"] == out["choices"]


def test_chat_completion_stream_chunks(model):
    chunks = list(model.create_chat_completion(MESSAGES, max_tokens=8, seed=9, stream=True))
    whole = model.create_chat_completion(MESSAGES, max_tokens=8, seed=9)
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None,
                                        "finish_reason": "length"}


def test_off_values_of_unsupported_fields_are_accepted(model):
    # What LangChain's LlamaCpp and OpenAI clients send by default.
    out = model.create_completion("Once", max_tokens=3, seed=1, logprobs=None, echo=False,
                                  suffix=None, typical_p=1, logit_bias={}, n=1, stop=[],
                                  response_format=None, user="u")
    assert out["choices"][0]["text"] == model.generate("Once", max_tokens=3, seed=1).text
    model.create_chat_completion(MESSAGES, max_tokens=2, tools=None, tool_choice="none",
                                 response_format={"type": "text"})


@pytest.mark.parametrize("fields, error, message", [
    ({"logprobs": 2}, ValueError, "'logprobs' is not supported"),
    ({"echo": True}, ValueError, "'echo' is not supported"),
    ({"logit_bias": {"1": 5}}, ValueError, "'logit_bias' is not supported"),
    ({"mirostat_mode": 2}, ValueError, "'mirostat_mode'"),
    ({"response_format": {"type": "xml"}}, ValueError, "'response_format.type' must be"),
    ({"response_format": {"type": "json_object"}, "grammar": "root ::= \"a\""}, ValueError,
     "'grammar' cannot be combined with a JSON response_format"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, ValueError,
     "'tools' is not supported .tools are offered to create_chat_completion"),
    ({"grammar": "root ::= ("}, Exception, "line 1"),
    ({"n": 2}, ValueError, "'n' must be 1"),
    ({"stream_options": {"x": 1}}, ValueError, "stream_options.x"),
    ({"frobnicate": 1}, TypeError, "unexpected keyword argument 'frobnicate'"),
    ({"max_tokens": "8"}, TypeError, "max_tokens must be an int"),
    ({"temperature": "hot"}, TypeError, "temperature must be an int or a float"),
])
def test_unsupported_fields_are_refused_by_name(model, fields, error, message):
    with pytest.raises(error, match=message):
        model.create_completion("Once", **fields)


@pytest.mark.parametrize("messages, error, message", [
    ([], TypeError, "messages must be a non-empty list"),
    ([{"content": "x"}], TypeError, r"messages\[0\].role"),
    ([{"role": "user"}], ValueError, r"messages\[0\].content is required"),
    ([{"role": "user", "content": "x", "name": "n"}], ValueError, r"messages\[0\].name"),
    ([{"role": "user", "content": [{"type": "image_url"}]}], ValueError, "only text"),
])
def test_bad_chat_messages_are_refused_by_name(model, messages, error, message):
    with pytest.raises(error, match=message):
        model.create_chat_completion(messages)


def test_bad_tools_are_refused_by_name(model):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"oneOf": []}}}]
    with pytest.raises(ValueError, match=r"tools\[0\].function.parameters"):
        model.create_chat_completion(MESSAGES, tools=tools)
    with pytest.raises(ValueError, match="'tool_choice' needs \"tools\""):
        model.create_chat_completion(MESSAGES, tool_choice="required")
    with pytest.raises(ValueError, match="'functions' is not supported"):
        model.create_chat_completion(MESSAGES, functions=[{"name": "f"}])


def test_closed_model_refuses(model_path):
    m = retnet.load(str(model_path))
    m.close()
    with pytest.raises(retnet.Error, match="closed"):
        m.create_completion("Once")
