"""Structured output in `retnet serve`: response_format json_object / json_schema, tool calls
with tool_choice "required", a named function or "auto", and llama-server's GBNF `grammar`. A
random model sampled under the grammar must still answer with JSON that parses and validates
against the schema (or a sentence of the GBNF), for every seed; what the server cannot honour is
a 400 naming the field or the schema keyword."""
import json
import re

from server_harness import Server, check, expect_json_error, finish, parse_args, tiny_model

# A schema touching every keyword of the subset (docs/server.md).
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 8},
        "age": {"type": "integer"},
        "score": {"type": "number"},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", 3, None]}, "minItems": 1,
                 "maxItems": 3},
        "kind": {"const": "person"},
        "nick": {"anyOf": [{"type": "string", "maxLength": 4}, {"type": "null"}]},
        "pet": {"$ref": "#/$defs/pet"},
    },
    "required": ["name", "age", "ok", "tags", "kind", "pet"],
    "additionalProperties": False,
    "$defs": {"pet": {"type": "object", "properties": {"legs": {"type": "integer"},
                                                       "names": {"type": "array", "maxItems": 2,
                                                                 "items": {"type": "string",
                                                                           "maxLength": 3}}},
                      "required": ["legs"]}},
}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 10},
            "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}}},
    {"type": "function", "function": {
        "name": "add", "parameters": {"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"],
            "additionalProperties": False}}},
]


def validate(v, s, root):
    """Whether JSON value `v` satisfies schema `s` (the subset the server compiles)."""
    if s is True or s == {}:
        return True
    if "$ref" in s:
        return validate(v, root["$defs"][s["$ref"].split("/")[-1]], root)
    if "const" in s:
        return v == s["const"] and type(v) is type(s["const"])
    if "enum" in s:
        return any(v == e and type(v) is type(e) for e in s["enum"])
    if "anyOf" in s:
        return any(validate(v, x, root) for x in s["anyOf"])
    t = s.get("type")
    if t == "object":
        props = s.get("properties", {})
        return (isinstance(v, dict) and all(k in v for k in s.get("required", [])) and
                (s.get("additionalProperties", True) or all(k in props for k in v)) and
                all(validate(x, props[k], root) for k, x in v.items() if k in props))
    if t == "array":
        return (isinstance(v, list) and s.get("minItems", 0) <= len(v) <= s.get("maxItems", 1e9)
                and all(validate(x, s.get("items", {}), root) for x in v))
    if t == "string":
        return isinstance(v, str) and s.get("minLength", 0) <= len(v) <= s.get("maxLength", 1e9)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "null":
        return v is None
    raise ValueError(f"schema outside the test's subset: {s}")


def parsed(text):
    try:
        return json.loads(text)
    except ValueError:
        return ValueError


def chat(content, **fields):
    return {"messages": [{"role": "user", "content": content}], "temperature": 1.0,
            "max_tokens": 3000, **fields}


def test_json_object(s):
    """Any JSON object, for every seed, from a model that has never seen JSON."""
    for seed in range(1, 9):
        st, r = s.json("POST", "/v1/chat/completions",
                       chat("An object?", seed=seed, response_format={"type": "json_object"}))
        c = r["choices"][0] if st == 200 else {}
        text = c.get("message", {}).get("content", "")
        check(st == 200 and c["finish_reason"] == "stop" and isinstance(parsed(text), dict),
              f"json_object seed {seed}: {st} {c.get('finish_reason')} {text!r}")


def test_json_schema(s):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "strict": True,
                                                   "schema": SCHEMA}}
    for seed in range(1, 13):
        st, r = s.json("POST", "/v1/chat/completions",
                       chat("Who?", seed=seed, response_format=fmt))
        c = r["choices"][0] if st == 200 else {}
        text = c.get("message", {}).get("content", "")
        v = parsed(text)
        check(st == 200 and c["finish_reason"] == "stop" and validate(v, SCHEMA, SCHEMA),
              f"json_schema seed {seed}: {st} {c.get('finish_reason')} {text!r}")
        if seed == 1:  # properties are written in the schema's order
            check(isinstance(v, dict) and list(v)[:2] == ["name", "age"], f"property order: {text!r}")
    # Streamed, and on the completions endpoint, as text.
    events = s.stream("/v1/chat/completions", chat("Who?", seed=21, response_format=fmt))
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                   for e in events if e != "[DONE]" and json.loads(e).get("choices"))
    check(validate(parsed(text), SCHEMA, SCHEMA), f"streamed json_schema: {text!r}")
    st, r = s.json("POST", "/v1/completions", {"prompt": "{", "seed": 4, "max_tokens": 3000,
                                               "temperature": 1, "response_format": fmt})
    text = r["choices"][0]["text"] if st == 200 else ""
    check(validate(parsed(text), SCHEMA, SCHEMA), f"completions json_schema: {st} {text!r}")
    # A text that is not JSON without the constraint, from the same seed.
    st, r = s.json("POST", "/v1/chat/completions", chat("Who?", seed=1, max_tokens=40))
    check(st == 200 and parsed(r["choices"][0]["message"]["content"]) is ValueError,
          f"unconstrained text is not JSON: {r}")


def test_tool_calls(s):
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for seed in range(1, 7):
        st, r = s.json("POST", "/v1/chat/completions",
                       chat("Weather in Paris?", seed=seed, tools=TOOLS, tool_choice="required"))
        c = r["choices"][0] if st == 200 else {}
        calls = c.get("message", {}).get("tool_calls") or []
        ok = st == 200 and c["finish_reason"] == "tool_calls" and len(calls) == 1 and \
            c["message"]["content"] is None and calls[0]["type"] == "function" and \
            calls[0]["id"].startswith("call_")
        if ok:
            f = calls[0]["function"]
            ok = f["name"] in params and validate(parsed(f["arguments"]), params[f["name"]], {})
        check(ok, f"tool_choice required, seed {seed}: {st} {r}")
    named = {"type": "function", "function": {"name": "add"}}
    st, r = s.json("POST", "/v1/chat/completions",
                   chat("1 + 2?", seed=3, tools=TOOLS, tool_choice=named))
    calls = r["choices"][0]["message"].get("tool_calls") if st == 200 else None
    check(calls and calls[0]["function"]["name"] == "add" and
          validate(parsed(calls[0]["function"]["arguments"]), params["add"], {}),
          f"a named tool_choice calls that function: {st} {r}")
    events = [json.loads(e) for e in s.stream("/v1/chat/completions",
                                              chat("1 + 2?", seed=5, tools=TOOLS,
                                                   tool_choice=named)) if e != "[DONE]"]
    deltas = [c["delta"] for e in events for c in e["choices"]]
    streamed = [t for d in deltas for t in d.get("tool_calls", [])]
    check(len(streamed) == 1 and streamed[0]["index"] == 0 and
          validate(parsed(streamed[0]["function"]["arguments"]), params["add"], {}) and
          events[-1]["choices"][0]["finish_reason"] == "tool_calls" and
          not any(d.get("content") for d in deltas),
          f"a streamed call comes as delta.tool_calls: {events}")
    # The call and its result go back into the conversation, rendered by the template.
    turn = chat("1 + 2?", seed=3, tools=TOOLS, tool_choice=named)
    st, first = s.json("POST", "/v1/chat/completions", turn)
    message = first["choices"][0]["message"] if st == 200 else {}
    turn["messages"] += [message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"],
                                   "content": "3"}]
    st, r = s.json("POST", "/v1/chat/completions", dict(turn, tool_choice="none", max_tokens=4))
    # The default template writes the call compactly, then the result as a `tool` turn (bytes).
    f = message["tool_calls"][0]["function"]
    call = json.dumps({"name": f["name"], "arguments": json.loads(f["arguments"])},
                      separators=(",", ":"), ensure_ascii=False)
    added = len((call + "<|end|>\n<|tool|>\n3<|end|>\n<|assistant|>\n").encode())
    check(st == 200 and r["usage"]["prompt_tokens"] == first["usage"]["prompt_tokens"] + added,
          f"a call and its result in the history are rendered: {st} {r}")
    st, r = s.json("POST", "/v1/chat/completions",
                   chat("Hi", seed=3, max_tokens=8, tools=TOOLS, tool_choice="none"))
    check(st == 200 and r["choices"][0]["finish_reason"] == "length" and
          "tool_calls" not in r["choices"][0]["message"], f"tool_choice none ignores tools: {r}")


def test_tool_auto(s):
    """tool_choice "auto" (the default): a reply starting with '{' is a whole, valid call;
    any other is prose. A bias on '{' (token 123 of the byte vocabulary) picks the branch."""
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

    def valid_call(calls):
        return len(calls) == 1 and calls[0]["function"]["name"] in params and validate(
            parsed(calls[0]["function"]["arguments"]), params[calls[0]["function"]["name"]], {})

    kinds = set()
    for seed in range(1, 9):
        bias = {1: {"123": 100}, 2: {"123": -100}}.get(seed, {})
        st, r = s.json("POST", "/v1/chat/completions",
                       chat("Weather?", seed=seed, tools=TOOLS, max_tokens=400, logit_bias=bias))
        c = r["choices"][0] if st == 200 else {}
        m = c.get("message", {})
        if m.get("tool_calls"):
            kinds.add("call")
            ok = c["finish_reason"] == "tool_calls" and m["content"] is None and \
                valid_call(m["tool_calls"])
        else:
            kinds.add("prose")
            ok = st == 200 and not m["content"].startswith("{") and \
                c["finish_reason"] in ("stop", "length")
        check(ok and (seed != 1 or "tool_calls" in m) and (seed != 2 or "tool_calls" not in m),
              f"tool_choice auto, seed {seed} bias {bias}: {st} {r}")
    check(kinds == {"call", "prose"}, f"auto answers both ways: {kinds}")
    for bias, want in (({"123": 100}, "tool_calls"), ({"123": -100}, None)):
        events = [json.loads(e) for e in s.stream(
            "/v1/chat/completions", chat("Weather?", seed=4, tools=TOOLS, max_tokens=400,
                                         logit_bias=bias)) if e != "[DONE]"]
        deltas = [c["delta"] for e in events for c in e["choices"]]
        calls = [t for d in deltas for t in d.get("tool_calls", [])]
        text = "".join(d.get("content") or "" for d in deltas)
        reason = events[-1]["choices"][0]["finish_reason"]
        ok = (valid_call(calls) and not text and reason == want) if want else \
            (not calls and text and not text.startswith("{") and reason in ("stop", "length"))
        check(ok, f"a streamed auto reply, bias {bias}: {calls} {text!r} {reason}")


GBNF = r"""# an answer, then a reason
root ::= answer ", " reason
answer ::= "yes" | "no"
  | "maybe"
reason ::= ([a-z\u00e9]{1,6} " "){0,3} [^ \n.!"]{1,4} ("." | "!")
"""
GBNF_RE = re.compile(r"(yes|no|maybe), ([a-z\u00e9]{1,6} ){0,3}[^ \n.!\"]{1,4}[.!]", re.S)


def test_grammar(s):
    """llama-server's `grammar` (GBNF): every reply is a sentence of it, on both endpoints."""
    for seed in range(1, 7):
        body = {"grammar": GBNF, "seed": seed, "temperature": 1.0, "max_tokens": 200}
        if seed % 2:
            st, r = s.json("POST", "/v1/completions", dict(body, prompt="Well?"))
            text = r["choices"][0]["text"] if st == 200 else ""
        else:
            st, r = s.json("POST", "/v1/chat/completions", chat("Well?", **body))
            text = r["choices"][0]["message"]["content"] if st == 200 else ""
        check(st == 200 and r["choices"][0]["finish_reason"] == "stop" and
              GBNF_RE.fullmatch(text) is not None, f"grammar, seed {seed}: {st} {text!r}")
    h = {}
    expect_json_error(s, 400, "POST", "/v1/completions",
                      {"prompt": "x", "grammar": "root ::= a\nb ::= \"x\" )"}, h, "grammar",
                      "a grammar that does not parse")
    st, r = s.json("POST", "/v1/completions", {"prompt": "x", "grammar": "root ::= (\"a\""})
    check(st == 400 and "line 1, column 14" in r["error"]["message"] and
          r["error"]["code"] == "invalid_grammar", f"the error names line and column: {r}")
    expect_json_error(s, 400, "POST", "/v1/chat/completions",
                      chat("x", grammar=GBNF, response_format={"type": "json_object"}), h,
                      "grammar", "grammar with response_format")
    expect_json_error(s, 400, "POST", "/v1/chat/completions",
                      chat("x", grammar=GBNF, tools=TOOLS, tool_choice="required"), h, "grammar",
                      "grammar with tools")


def test_refusals(s):
    h = {}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"x": {"type": "string", "pattern": "^a"}}}}}
    expect_json_error(s, 400, "POST", "/v1/chat/completions", chat("x", response_format=fmt), h,
                      "response_format.json_schema.schema.properties.x.pattern",
                      "a schema keyword outside the subset")
    expect_json_error(s, 400, "POST", "/v1/chat/completions",
                      chat("x", response_format={"type": "xml"}), h, "response_format.type",
                      "an unknown response_format type")
    expect_json_error(s, 400, "POST", "/v1/chat/completions", chat("x", tool_choice="required"),
                      h, "tool_choice", "tool_choice without tools")
    bad_tool = [{"type": "function", "function": {"name": "f", "parameters": {"oneOf": []}}}]
    expect_json_error(s, 400, "POST", "/v1/chat/completions",
                      chat("x", tools=bad_tool, tool_choice="required"), h,
                      "tools[0].function.parameters.oneOf", "a parameters keyword outside")
    history = chat("x")
    history["messages"] += [{"role": "user", "tool_call_id": "call_1", "content": "12 C"}]
    expect_json_error(s, 400, "POST", "/v1/chat/completions", history, h,
                      "messages[1].tool_call_id", "tool_call_id outside a tool message")


def main():
    a = parse_args()
    model = tiny_model(a.retnet, a.workdir)
    s = Server(a.retnet, model, a.workdir, "structured", "--parallel", "4", "--max-tokens", "4000",
               "--no-ui")
    try:
        test_json_object(s)
        test_json_schema(s)
        test_tool_calls(s)
        test_tool_auto(s)
        test_grammar(s)
        test_refusals(s)
    finally:
        s.stop()
    finish("structured output tests")


if __name__ == "__main__":
    main()
