"""Tool calls from Python: tools and tool_choice in create_chat_completion and chat(), read and
constrained as `retnet serve` does (the engine's reading), answered in OpenAI's shapes."""
import json

import pytest

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"enum": ["Paris", "Rome", "Oslo"]}, "days": {"type": "integer"}},
            "required": ["city", "days"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "parameters": {"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"], "additionalProperties": False}}},
]
MESSAGES = [{"role": "user", "content": "Weather in Rome for 3 days?"}]


def check_call(call, names=("get_weather", "add")):
    """A tool call in OpenAI's shape whose arguments validate against its function."""
    assert call["type"] == "function" and call["id"].startswith("call_"), call
    name = call["function"]["name"]
    assert name in names, call
    args = json.loads(call["function"]["arguments"])
    if name == "get_weather":
        assert set(args) == {"city", "days"} and args["city"] in ("Paris", "Rome", "Oslo")
        assert isinstance(args["days"], int)
    else:
        assert set(args) == {"a", "b"} and all(isinstance(v, int) for v in args.values())
    return name, args


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_required_tool_choice_returns_a_valid_call(model, seed):
    reply = model.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice="required",
                                         max_tokens=300, seed=seed, temperature=1.0)
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls", reply
    assert choice["message"]["content"] is None
    assert len(choice["message"]["tool_calls"]) == 1
    check_call(choice["message"]["tool_calls"][0])


def test_a_named_function_is_the_one_called(model):
    for seed in (4, 5):
        reply = model.create_chat_completion(
            MESSAGES, tools=TOOLS, max_tokens=300, seed=seed, temperature=1.0,
            tool_choice={"type": "function", "function": {"name": "add"}})
        assert reply["choices"][0]["finish_reason"] == "tool_calls", reply
        check_call(reply["choices"][0]["message"]["tool_calls"][0], names=("add",))


def test_streamed_calls_come_as_one_delta(model):
    fields = dict(tools=TOOLS, tool_choice="required", max_tokens=300, seed=6, temperature=1.0)
    whole = model.create_chat_completion(MESSAGES, **fields)["choices"][0]["message"]
    chunks = list(model.create_chat_completion(MESSAGES, stream=True, **fields))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    calls = [c["choices"][0]["delta"]["tool_calls"] for c in chunks
             if "tool_calls" in c["choices"][0]["delta"]]
    assert len(calls) == 1 and calls[0][0]["index"] == 0, chunks
    assert calls[0][0]["function"] == whole["tool_calls"][0]["function"]
    assert all(not c["choices"][0]["delta"].get("content") for c in chunks), "no text"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_auto_replies_are_calls_or_text(model):
    kinds = set()
    for seed in range(1, 9):
        reply = model.create_chat_completion(MESSAGES, tools=TOOLS, max_tokens=60, seed=seed,
                                             temperature=1.0)
        choice = reply["choices"][0]
        if choice["finish_reason"] == "tool_calls":
            check_call(choice["message"]["tool_calls"][0])
            kinds.add("call")
        else:  # prose: its first byte is not '{', or a call cut by max_tokens
            text = choice["message"]["content"]
            assert isinstance(text, str) and "tool_calls" not in choice["message"]
            assert not text.startswith("{") or choice["finish_reason"] == "length", reply
            kinds.add("text")
    assert kinds, "no reply"


def test_chat_returns_tool_calls_and_holds_streamed_calls(model):
    out = model.chat(MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=300, seed=2,
                     temperature=1.0)
    assert out.finish_reason == "tool_calls" and len(out.tool_calls) == 1, out
    name, args = check_call(out.tool_calls[0])
    assert json.loads(out.text) == {"name": name, "arguments": args}
    stream = model.chat(MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=300, seed=2,
                        temperature=1.0, stream=True)
    assert list(stream) == []  # a call is not text
    assert stream.result.finish_reason == "tool_calls"
    assert stream.result.tool_calls[0]["function"] == out.tool_calls[0]["function"]
    # tool_choice "none": the tools are not offered; plain text, as without them.
    plain = model.chat(MESSAGES, tools=TOOLS, tool_choice="none", max_tokens=8, seed=3)
    assert plain.tool_calls is None
    assert plain == model.chat(MESSAGES, max_tokens=8, seed=3)


def test_a_conversation_with_calls_and_results(model):
    history = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\", \"days\": 3}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 C"}]
    reply = model.create_chat_completion(history, tools=TOOLS, max_tokens=4, seed=1)
    assert reply["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls")
    bad = [dict(history[1], tool_calls=[{"function": {"name": "f", "arguments": "{"}}])]
    with pytest.raises(ValueError, match=r"messages\[1\].tool_calls\[0\].function.arguments"):
        model.create_chat_completion(MESSAGES + bad, tools=TOOLS)
    with pytest.raises(ValueError, match=r"messages\[1\].tool_call_id"):
        model.create_chat_completion(MESSAGES + [{"role": "user", "content": "x",
                                                  "tool_call_id": "c"}])
