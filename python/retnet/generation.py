"""Model.generate / Model.generate_batch: argument checks and the result object.

The engine's `Model._generate` does the work; this layer turns a wrong argument into a TypeError
that names it (instead of pybind11's signature dump) and wraps each result in a Completion.
"""
import json

from ._retnet import Model, TextStream
from ._retnet import _structured_output as _parse_structured_output

_NUMBER = "an int or a float"


class Completion(str):
    """A generation's text (a str, so code that prints or compares it keeps working) with:

    text: the generated text (without the prompt).
    tokens: the generated token ids (an end-of-sequence token that ended the text is not one).
    finish_reason: the engine's name (as `retnet generate` and the server's logs give it):
        "stop" (a stop string ended it), "length" (max_tokens reached) or "eos" (the
        tokenizer's end-of-sequence token; OpenAI's API calls this one "stop" too).
    tool_calls: chat() with tools, when the reply is a call: OpenAI's list of
        {"id", "type": "function", "function": {"name", "arguments": "<JSON text>"}} (the text
        is then the call as the model wrote it, and finish_reason is "tool_calls"); else None.
    usage: {"prompt_tokens", "completion_tokens", "total_tokens"}, and with speculative=...
        "speculative": {"checks", "drafted_tokens", "accepted_tokens"} (checking passes, tokens
        drafted for them, drafted tokens kept).
    """

    def __new__(cls, text, tokens=(), finish_reason=None, usage=None, tool_calls=None):
        self = super().__new__(cls, text)
        self.tokens = list(tokens)
        self.finish_reason = finish_reason
        self.usage = dict(usage or {})
        self.tool_calls = tool_calls
        return self

    @classmethod
    def _of(cls, result):
        """A Completion of the engine's result dict."""
        prompt, completion = result["prompt_tokens"], result["completion_tokens"]
        usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                 "total_tokens": prompt + completion}
        if "speculative" in result:
            usage["speculative"] = dict(result["speculative"])
        return cls(result["text"], result["tokens"], result["finish_reason"], usage)

    def __reduce__(self):  # pickle and copy keep the fields (str's own would drop them)
        return (Completion, (self.text, self.tokens, self.finish_reason, self.usage,
                             self.tool_calls))

    @property
    def text(self):
        return str.__str__(self)

    def __repr__(self):
        calls = "" if self.tool_calls is None else f", tool_calls={self.tool_calls!r}"
        return (f"Completion(text={self.text!r}, finish_reason={self.finish_reason!r}{calls}, "
                f"usage={self.usage!r})")


def _fail(name, accepted, value):
    raise TypeError(f"{name} must be {accepted}, got {type(value).__name__}")


def _int(name, value, none_ok=False):
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(name, "an int" + (" or None" if none_ok else ""), value)
    return value


def _float(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(name, _NUMBER, value)
    return float(value)


def _bool(name, value, none_ok=False):
    if value is None and none_ok:
        return None
    if not isinstance(value, bool):
        _fail(name, "a bool" + (" or None" if none_ok else ""), value)
    return value


def _prompt(name, value):
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and all(
            isinstance(t, int) and not isinstance(t, bool) for t in value):
        return list(value)
    _fail(name, "a str or a list of int token ids", value)


def _stop(value):
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(s, str) for s in value):
        return list(value)
    _fail("stop", "None, a str or a list of str", value)


_SPECULATIVE_KEYS = ("lookup", "draft_max", "draft_model")


def _speculative(value):
    """The engine's lookup, draft_max and draft_model of generate's `speculative` argument."""
    if value is None:
        return dict(lookup=0, draft_max=8, draft_model=None)
    if not isinstance(value, dict):
        _fail("speculative", "None or a dict such as {'lookup': 3, 'draft_max': 8}", value)
    for key in value:
        if key not in _SPECULATIVE_KEYS:
            raise ValueError(f"speculative: unknown key {key!r} (it takes "
                             f"{', '.join(_SPECULATIVE_KEYS)})")
    lookup = _int("speculative['lookup']", value.get("lookup", 0))
    draft_max = _int("speculative['draft_max']", value.get("draft_max", 8))
    draft_model = value.get("draft_model")
    if draft_model is not None and not isinstance(draft_model, Model):
        _fail("speculative['draft_model']", "a retnet.Model", draft_model)
    if lookup < 0:
        raise ValueError(f"speculative['lookup'] must be >= 1 (tokens to match), got {lookup}")
    if draft_max < 1:
        raise ValueError(f"speculative['draft_max'] must be >= 1, got {draft_max}")
    if (lookup > 0) == (draft_model is not None):
        raise ValueError("speculative takes one drafter: 'lookup' (prompt lookup, >= 1) or "
                         "'draft_model', not " + ("both" if lookup > 0 else "neither"))
    return dict(lookup=lookup, draft_max=draft_max, draft_model=draft_model)


def _structured_output(response_format=None, grammar=None, tools=None, tool_choice=None,
                       parallel_tool_calls=None, chat=False):
    """The engine's reading of the structured-output fields (the same as `retnet serve`'s, with
    its errors naming the field), or None when there are none. tools and tool_choice are read in
    a chat only."""
    if grammar is not None and not isinstance(grammar, str):
        _fail("grammar", "None or a str (a GBNF grammar)", grammar)
    if response_format is not None and not isinstance(response_format, dict):
        _fail("response_format", "None or a dict with a 'type' (text, json_object or "
                                 "json_schema)", response_format)
    fields = {"response_format": response_format, "grammar": grammar}
    if chat:
        fields.update(tools=tools, tool_choice=tool_choice,
                      parallel_tool_calls=parallel_tool_calls)
    request = {k: v for k, v in fields.items() if v is not None}
    if not request:
        return None
    try:
        text = json.dumps(request)
    except (TypeError, ValueError) as e:
        raise TypeError(f"response_format, grammar and tools must be JSON values: {e}") from None
    return _parse_structured_output(text, chat)


def _engine_args(max_tokens, max_new_tokens, temperature, top_k, top_p, stop, seed,
                 repeat_penalty, repeat_last_n, add_bos, ignore_eos, min_p, presence_penalty,
                 frequency_penalty):
    if max_new_tokens is not None:  # the transformers name
        max_tokens = _int("max_new_tokens", max_new_tokens)
    return dict(max_tokens=_int("max_tokens", max_tokens),
                temperature=_float("temperature", temperature), top_k=_int("top_k", top_k),
                top_p=_float("top_p", top_p), stop=_stop(stop), seed=_int("seed", seed, True),
                repeat_penalty=_float("repeat_penalty", repeat_penalty),
                repeat_last_n=_int("repeat_last_n", repeat_last_n),
                add_bos=_bool("add_bos", add_bos, True), ignore_eos=_bool("ignore_eos", ignore_eos),
                min_p=_float("min_p", min_p),
                presence_penalty=_float("presence_penalty", presence_penalty),
                frequency_penalty=_float("frequency_penalty", frequency_penalty))


def generate(self, prompt, max_tokens=128, temperature=0.8, top_k=40, top_p=0.95, stop=None,
             seed=None, stream=False, repeat_penalty=1.0, repeat_last_n=64, add_bos=None,
             ignore_eos=False, min_p=0.0, presence_penalty=0.0, frequency_penalty=0.0, *,
             max_new_tokens=None, speculative=None, response_format=None, grammar=None,
             _structured=None):
    """Generates after a prompt (chunkwise prefill, then recurrent decoding), as `retnet
    generate` does: the same seed gives the same text.

    prompt: a str (encoded with the model's tokenizer; add_bos None: as the tokenizer does) or
        a list of token ids (fed as given).
    max_tokens: tokens to generate at most (max_new_tokens: the same, transformers' name).
    stop: a str or list of str the text ends before. seed None: a random one.
    speculative: speculative decoding, as `retnet generate --lookup N --draft-max K` or
        `--draft-model M`: {"lookup": N} (prompt lookup: draft what followed the last N tokens
        where they occur earlier) or {"draft_model": a Model with the same tokenizer}, with
        "draft_max": K (most tokens drafted per check, default 8). One pass checks the drafts;
        the text is the one plain decoding gives (greedy, or the same seed's distribution), and
        .usage["speculative"] counts checks, drafted and accepted tokens.
    response_format: constrained output, as OpenAI's API and `retnet serve` take it:
        {"type": "json_object"} (any JSON object; llama-cpp-python's "schema" key may add one)
        or {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}; sampling is
        masked token by token so the text parses (and validates), and ends when it is complete.
    grammar: the same with a GBNF grammar (llama.cpp's syntax; docs/server.md lists it).
    _structured: chat()'s reading of response_format, grammar and tools (private).
    Returns a Completion: the text (a str) with .tokens, .finish_reason and .usage. stream=True
    returns a TextStream of text pieces instead; its .result is the Completion once it is
    exhausted. The GIL is released while it computes; Ctrl-C stops it between steps.
    """
    if _structured is not None and (response_format is not None or grammar is not None):
        raise ValueError("give response_format and grammar to chat() itself")
    constraint = (_structured if _structured is not None
                  else _structured_output(response_format, grammar))
    prompt = _prompt("prompt", prompt)
    stream = _bool("stream", stream)
    args = _engine_args(max_tokens, max_new_tokens, temperature, top_k, top_p, stop, seed,
                        repeat_penalty, repeat_last_n, add_bos, ignore_eos, min_p,
                        presence_penalty, frequency_penalty)
    out = self._generate([prompt], stream=stream, **args, **_speculative(speculative),
                         constraint=constraint)
    return out if stream else Completion._of(out[0])


def generate_batch(self, prompts, max_tokens=128, temperature=0.8, top_k=40, top_p=0.95,
                   stop=None, seed=None, repeat_penalty=1.0, repeat_last_n=64, add_bos=None,
                   ignore_eos=False, min_p=0.0, presence_penalty=0.0, frequency_penalty=0.0, *,
                   max_new_tokens=None):
    """Generates after several prompts (each a str or a list of token ids) decoded together as
    one batch. Every prompt samples with the same key (seed, position), so each gets the text
    it gets from generate alone with that seed. Returns a list of Completions."""
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, (list, tuple)):
        _fail("prompts", "a list of str or of token-id lists", prompts)
    checked = [_prompt(f"prompts[{i}]", p) for i, p in enumerate(prompts)]
    args = _engine_args(max_tokens, max_new_tokens, temperature, top_k, top_p, stop, seed,
                        repeat_penalty, repeat_last_n, add_bos, ignore_eos, min_p,
                        presence_penalty, frequency_penalty)
    return [Completion._of(r) for r in self._generate(checked, stream=False, **args)]


def _stream_result(self):
    """The stream's Completion once generation has ended (surely once the stream is exhausted;
    None while it runs, or after an error)."""
    result = self._result()
    return None if result is None else Completion._of(result)


Model.generate = generate
Model.generate_batch = generate_batch
TextStream.result = property(_stream_result)
