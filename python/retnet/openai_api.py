"""Model.create_completion / Model.create_chat_completion: OpenAI-shaped dicts in and out, as
llama-cpp-python's methods of those names take and return them (the convention LangChain and
LlamaIndex integrate with), and as `retnet serve` answers /v1/completions and
/v1/chat/completions.

Every field is read or refused by name: a field whose meaning this engine does not implement
(logprobs, logit_bias, functions, ...) raises ValueError unless it has its
"off" value (None, False, 1.0, ...), because honouring it would change the output.
"""
import json
import random
import time
import uuid

from ._retnet import Model, _history_tool_calls
from .generation import _bool, _fail, _int, generate

# Sampling fields passed on to generate() as they are (its defaults are the server's).
_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "seed", "repeat_penalty", "repeat_last_n",
             "presence_penalty", "frequency_penalty", "stop", "ignore_eos", "speculative",
             "response_format", "grammar")
# A chat's tool fields, passed on to chat().
_TOOLS = ("tools", "tool_choice", "parallel_tool_calls")

# llama-cpp-python's and OpenAI's fields this engine does not implement, with the values that
# leave them off (anything else is refused).
_OFF_VALUES = {
    "logprobs": (None, False), "top_logprobs": (None, 0), "echo": (False,), "suffix": (None, ""),
    "logit_bias": (None, {}), "typical_p": (1.0,), "tfs_z": (1.0,), "mirostat_mode": (0,),
    "mirostat_tau": (5.0,), "mirostat_eta": (0.1,),
    "logits_processor": (None,), "stopping_criteria": (None,),
    "tools": (None, []), "tool_choice": (None, "none"), "functions": (None,),
    "function_call": (None,),
}
_NOT_SUPPORTED_WHY = {
    "tools": "tools are offered to create_chat_completion",
    "tool_choice": "tools are offered to create_chat_completion",
    "functions": "OpenAI's older form of tools: give tools and tool_choice",
    "function_call": "OpenAI's older form of tools: give tools and tool_choice",
}


def _is_off(value, off):
    if value is None or off is None or isinstance(value, bool) or isinstance(off, bool):
        return value is off
    if isinstance(value, (int, float)) and isinstance(off, (int, float)):
        return value == off
    return type(value) is type(off) and value == off


def _check_fields(method, fields, accepted):
    for name, value in fields.items():
        if name in accepted:
            continue
        if name not in _OFF_VALUES:
            raise TypeError(f"{method}() got an unexpected keyword argument '{name}'")
        if not any(_is_off(value, off) for off in _OFF_VALUES[name]):
            why = _NOT_SUPPORTED_WHY.get(name, "this engine does not implement it")
            offs = " or ".join(repr(v) for v in _OFF_VALUES[name])
            raise ValueError(f"{method}(): '{name}' is not supported ({why}); leave it {offs}, "
                             f"got {value!r}")


def _common(method, fields, chat):
    """The generate() keywords and the response context of a request's fields."""
    model_name = fields.get("model")
    if model_name is not None and not isinstance(model_name, str):
        _fail("model", "a str or None", model_name)
    user = fields.get("user")
    if user is not None and not isinstance(user, str):
        _fail("user", "a str or None", user)
    n = fields.get("n", 1)
    if _int("n", n, none_ok=True) not in (None, 1):
        raise ValueError(f"{method}(): 'n' must be 1 (one choice per call), got {n}")
    stream = _bool("stream", fields.get("stream", False), none_ok=True) or False
    options = fields.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            _fail("stream_options", "a dict or None", options)
        for key in options:
            if key != "include_usage":
                raise ValueError(f"{method}(): 'stream_options.{key}' is not supported (only "
                                 "include_usage)")
        include_usage = _bool("stream_options.include_usage", options.get("include_usage", False))
    args = {k: fields[k] for k in _SAMPLING if fields.get(k) is not None}
    if args.get("seed") is None:  # picked here so that the reply can report it, as the server's
        args["seed"] = random.SystemRandom().getrandbits(63)
    max_name = "max_completion_tokens" if chat and fields.get(
        "max_completion_tokens") is not None else "max_tokens"
    max_tokens = fields.get(max_name)
    if max_tokens is not None:
        args["max_tokens"] = _int(max_name, max_tokens)
    elif not chat:
        args["max_tokens"] = 16  # llama-cpp-python's and OpenAI's default for completions
    context = {"id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
               "object": "chat.completion" if chat else "text_completion",
               "created": int(time.time()), "model": model_name or "retnet",
               "seed": args["seed"]}
    return args, context, stream, include_usage


def _openai_finish(reason):
    # OpenAI's API names an end-of-sequence token's end "stop" too.
    return reason if reason in ("length", "tool_calls") else "stop"


def _choice(chat, completion):
    choice = {"index": 0, "logprobs": None,
              "finish_reason": _openai_finish(completion.finish_reason)}
    if chat and completion.tool_calls is not None:
        choice["message"] = {"role": "assistant", "content": None,
                             "tool_calls": completion.tool_calls}
    elif chat:
        choice["message"] = {"role": "assistant", "content": completion.text}
    else:
        choice["text"] = completion.text
    return choice


def _response(context, chat, completion):
    out = dict(context)
    out["choices"] = [_choice(chat, completion)]
    out["usage"] = dict(completion.usage)
    return out


def _chunks(context, chat, stream, include_usage):
    """The chunk dicts of a streamed reply: the pieces, then one with the finish reason (and one
    with the usage when asked)."""
    base = dict(context, object="chat.completion.chunk" if chat else "text_completion")

    def chunk(text, finish_reason, first=False, tool_calls=None):
        choice = {"index": 0, "logprobs": None, "finish_reason": finish_reason}
        if chat:
            delta = {"role": "assistant"} if first else {}
            if text or first:
                delta["content"] = text
            if tool_calls is not None:
                delta["tool_calls"] = tool_calls
            choice["delta"] = delta
        else:
            choice["text"] = text
        return dict(base, choices=[choice])

    if chat:
        yield chunk("", None, first=True)
    for piece in stream:
        yield chunk(piece, None)
    result = stream.result
    if chat and result.tool_calls is not None:  # the whole call in one delta, as the server's
        yield chunk("", None, tool_calls=[dict(call, index=i)
                                          for i, call in enumerate(result.tool_calls)])
    yield chunk("", _openai_finish(result.finish_reason))
    if include_usage:
        yield dict(base, choices=[], usage=dict(result.usage))


def create_completion(self, prompt, **fields):
    """Continues `prompt` (a str, a list of token ids, or a list of one str) and returns an
    OpenAI text_completion dict: id, object, created, model, seed, choices [{text, index,
    logprobs, finish_reason}], usage. stream=True returns an iterator of chunk dicts instead.

    Fields (as llama-cpp-python and OpenAI name them): max_tokens (default 16), temperature,
    top_p, top_k, min_p, seed, repeat_penalty, repeat_last_n, presence_penalty,
    frequency_penalty, stop, ignore_eos, stream, stream_options {include_usage}, n (1), model
    and user (reported, not used), response_format and grammar (constrained output, as
    generate takes them), and the extension speculative (generate's; usage then has
    "speculative" counts). Defaults are generate's, so a seed gives generate's text.
    """
    _check_fields("create_completion", fields,
                  set(_SAMPLING) | {"max_tokens", "stream", "stream_options", "n", "model", "user"})
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]  # ["text"]: one prompt in a list, as OpenAI's API allows
    args, context, stream, include_usage = _common("create_completion", fields, chat=False)
    out = generate(self, prompt, stream=stream, **args)
    if stream:
        return _chunks(context, False, out, include_usage)
    return _response(context, False, out)


def _content_text(content, where):
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        _fail(where, "a str or a list of text parts", content)
    text = ""
    for i, part in enumerate(content):
        if (not isinstance(part, dict) or part.get("type") != "text"
                or not isinstance(part.get("text"), str) or set(part) != {"type", "text"}):
            raise ValueError(f"{where}[{i}] must be {{'type': 'text', 'text': str}} (only text "
                             "is supported)")
        text += part["text"]
    return text


def _chat_messages(messages):
    """OpenAI's messages as the chat template reads them ({role, content} with string content;
    an assistant's tool_calls with their arguments as objects, a tool's tool_call_id), checked
    as the server checks them."""
    if not isinstance(messages, list) or not messages:
        _fail("messages", "a non-empty list of dicts", messages)
    out = []
    for i, m in enumerate(messages):
        at = f"messages[{i}]"
        if not isinstance(m, dict):
            _fail(at, "a dict with 'role' and 'content'", m)
        role = m.get("role")
        if not isinstance(role, str) or not role:
            _fail(f"{at}.role", "a non-empty str (system, user or assistant)", role)
        # An assistant's tool calls and a tool's result, for templates that render them.
        extra = {"assistant": "tool_calls", "tool": "tool_call_id"}.get(role)
        for key in m:
            if key not in ("role", "content", extra):
                raise ValueError(f"{at}.{key} is not supported (a message has role and content, "
                                 "an assistant's tool_calls, a tool's tool_call_id)")
        message = {"role": role}
        if m.get("tool_calls") is not None:
            try:
                calls = json.dumps(m["tool_calls"])
            except (TypeError, ValueError) as e:
                raise TypeError(f"{at}.tool_calls must hold JSON values: {e}") from None
            message["tool_calls"] = json.loads(_history_tool_calls(calls, f"{at}.tool_calls"))
        if "tool_call_id" in m:
            if not isinstance(m["tool_call_id"], str):
                _fail(f"{at}.tool_call_id", "a str", m["tool_call_id"])
            message["tool_call_id"] = m["tool_call_id"]
        if m.get("content") is not None:
            message["content"] = _content_text(m["content"], f"{at}.content")
        elif "tool_calls" not in message:
            raise ValueError(f"{at}.content is required")
        out.append(message)
    return out


def create_chat_completion(self, messages, **fields):
    """Answers OpenAI-style chat messages through the model's chat template (Model.chat) and
    returns an OpenAI chat.completion dict: id, object, created, model, seed, choices [{index,
    message {role, content}, logprobs, finish_reason}], usage. stream=True returns an iterator
    of chat.completion.chunk dicts (delta {role} first, then {content} pieces, then the
    finish reason).

    Fields: create_completion's, max_completion_tokens (OpenAI's newer name of max_tokens;
    max_tokens None: generate's default), and tools, tool_choice and parallel_tool_calls as
    `retnet serve` takes them: a reply that is a call has message {"content": None,
    "tool_calls": [{"id", "type": "function", "function": {"name", "arguments": "<JSON
    text>"}}]} and finish_reason "tool_calls" (streamed: one delta with the whole call, each
    with its "index"). Messages may carry an assistant's tool_calls and a tool's tool_call_id.
    """
    _check_fields("create_chat_completion", fields,
                  set(_SAMPLING) | set(_TOOLS) | {"max_tokens", "max_completion_tokens",
                                                  "stream", "stream_options", "n", "model",
                                                  "user"})
    checked = _chat_messages(messages)
    args, context, stream, include_usage = _common("create_chat_completion", fields, chat=True)
    tools = {k: fields[k] for k in _TOOLS if fields.get(k) is not None}
    if tools.get("tools") == [] or ("tools" not in tools and tools.get("tool_choice") == "none"):
        tools = {}  # the off values, as llama-cpp-python's callers send them
    args.update(tools)
    out = self.chat(checked, stream=stream, **args)
    if stream:
        return _chunks(context, True, out, include_usage)
    return _response(context, True, out)


Model.create_completion = create_completion
Model.__call__ = create_completion  # llama-cpp-python's llm("Q: ...", max_tokens=32)
Model.create_chat_completion = create_chat_completion
