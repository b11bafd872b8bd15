"""Constrained output from Python: response_format (JSON object or schema) and GBNF grammars
mask sampling so the text always parses, as `retnet serve` does."""
import json

import pytest

import retnet

SCHEMA = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]},
                                           "count": {"enum": [1, 2, 3]}},
          "required": ["answer", "count"], "additionalProperties": False}


def check_schema(text):
    value = json.loads(text)
    assert set(value) == {"answer", "count"}, text
    assert value["answer"] in ("yes", "no") and value["count"] in (1, 2, 3), text


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_json_schema_output_parses_and_validates(model, seed):
    fmt = {"type": "json_schema", "json_schema": {"name": "reply", "schema": SCHEMA}}
    out = model.generate("Q: is it? A:", max_tokens=200, seed=seed, response_format=fmt)
    assert out.finish_reason == "stop", out
    check_schema(out.text)
    # llama-cpp-python's shape: a json_object with a schema.
    out = model.generate("Q:", max_tokens=200, seed=seed,
                         response_format={"type": "json_object", "schema": SCHEMA})
    check_schema(out.text)


def test_json_object_and_streaming(model):
    pieces = model.generate("x", max_tokens=400, seed=5, stream=True,
                            response_format={"type": "json_object"})
    text = "".join(pieces)
    assert text == pieces.result.text
    if pieces.result.finish_reason == "stop":  # complete: it parses
        assert isinstance(json.loads(text), dict), text
    else:  # cut by max_tokens: still the start of an object
        assert text.lstrip().startswith("{"), text


def test_gbnf_grammar(model):
    for seed in range(4):
        out = model.generate("Say:", max_tokens=20, seed=seed, grammar='root ::= "yes" | "no"')
        assert out.text in ("yes", "no") and out.finish_reason == "stop", out


def test_openai_shapes_take_response_format(model):
    reply = model.create_chat_completion(
        [{"role": "user", "content": "Answer in JSON."}], max_tokens=200, seed=4,
        response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}})
    check_schema(reply["choices"][0]["message"]["content"])
    out = model.create_completion("Q:", max_tokens=20, seed=1, grammar='root ::= [0-9]+ "."')
    text = out["choices"][0]["text"]
    assert text[:-1].isdigit() or out["choices"][0]["finish_reason"] == "length", text


def test_bad_constraints_are_refused_by_name(model):
    with pytest.raises(retnet.Error, match="minimum"):
        model.generate("x", response_format={"type": "json_schema", "json_schema": {
            "schema": {"type": "integer", "minimum": 0}}})
    with pytest.raises(ValueError, match="'response_format.strict' is not supported"):
        model.generate("x", response_format={"type": "json_object", "strict": True})
    with pytest.raises(TypeError, match="grammar must be None or a str"):
        model.generate("x", grammar=3)
    with pytest.raises(retnet.Error, match="grammar"):
        model.generate("x", response_format={"type": "json_object"},
                       speculative={"lookup": 2})
