"""Model.apply_chat_template / Model.chat: conversations through the model's chat template.

The template is the one `retnet serve` and `retnet chat-template --model` use for the same model
(a Hugging Face directory's tokenizer_config.json or chat_template.jinja, else the default
template of the models trained here), rendered by the engine's Jinja renderer.
"""
import json

from ._retnet import Error, Model
from .generation import _bool, _fail, _stop, _structured_output, generate


def _json(name, value, accepted):
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be {accepted} (JSON values only): {e}") from None


def _messages(messages):
    if not isinstance(messages, (list, tuple)) or not all(isinstance(m, dict) for m in messages):
        _fail("messages", "a list of dicts with 'role' and 'content'", messages)
    return _json("messages", list(messages), "a list of dicts with 'role' and 'content'")


def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False, *,
                        tools=None, documents=None, **variables):
    """The prompt text of a conversation, rendered with the model's chat template as
    transformers' apply_chat_template renders it (bos_token and eos_token from the model's
    tokenizer_config.json).

    messages: a list of {"role": str, "content": str | list of parts | None} dicts.
    add_generation_prompt: end with the header of the assistant's turn.
    tokenize: return the prompt's token ids (encoded with no BOS added: a template writes its
        own) instead of its text.
    tools, documents and any other keyword: template variables, as transformers passes them.
    """
    text = self._render_chat(_messages(messages),
                             _bool("add_generation_prompt", add_generation_prompt),
                             _variables(tools, documents, variables))
    if not _bool("tokenize", tokenize):
        return text
    if self.tokenizer is None:
        raise Error("tokenize=True: this model has no tokenizer (pass tokenizer= to retnet.init)")
    return self.tokenizer.encode(text)


def _variables(tools, documents, variables):
    extra = dict(variables)
    if tools is not None:
        extra["tools"] = tools
    if documents is not None:
        extra["documents"] = documents
    return _json("the template variables", extra, "a dict of JSON values")


def chat(self, messages, max_tokens=128, *, stop=None, stream=False, tools=None,
         tool_choice=None, parallel_tool_calls=None, response_format=None, grammar=None,
         **options):
    """Answers a conversation: the prompt is apply_chat_template(messages) (tokenized with no
    BOS added) and generation stops where the template ends a turn (the default template's
    "<|end|>", else the model's EOS token), as `retnet serve` does for /v1/chat/completions.

    tools, tool_choice: OpenAI's function tools, read as `retnet serve` reads them (the
    template renders `tools`): tool_choice "required" or {"type": "function", "function":
    {"name": ...}} constrains the reply to a call whose arguments validate against the
    function's parameters; "auto" (the default with tools) lets the model choose (a reply that
    starts with '{' is held to a call); "none" offers no tools. A reply that is a call has
    .tool_calls (OpenAI's list) and finish_reason "tool_calls".
    The other arguments are generate's (temperature, top_k, top_p, seed, max_new_tokens,
    response_format, grammar, ...).
    Returns a Completion (the reply's text with .tokens, .finish_reason and .usage), or with
    stream=True an iterator of text pieces whose .result is the Completion once it is exhausted
    (a reply that is a call is held back and not streamed as text).
    """
    if "add_bos" in options:
        raise TypeError("chat() got an unexpected keyword argument 'add_bos' (the chat "
                        "template writes the BOS it wants)")
    structured = _structured_output(response_format, grammar, tools, tool_choice,
                                    parallel_tool_calls, chat=True)
    offers_tools = structured is not None and structured.offers_tools
    prompt = self._render_chat(_messages(messages), True,
                               _variables(tools if offers_tools else None, None, {}))
    # A turn-end string inside structured output (a JSON string) must not cut it.
    prose = structured is None or structured.prose_may_stop
    stops = list(self._chat_template()["stop"]) if prose else []
    extra = _stop(stop)
    stops += [extra] if isinstance(extra, str) else (extra or [])
    out = generate(self, prompt, max_tokens, stop=stops or None, stream=stream, add_bos=False,
                   _structured=structured, **options)
    if not offers_tools:
        return out
    if stream:
        return ToolCallStream(out, structured)
    _mark_call(out, structured)
    return out


def _mark_call(completion, structured):
    """Gives a reply that is a whole call its tool_calls and finish_reason "tool_calls"."""
    # An end-of-sequence token is OpenAI's "stop" too.
    reason = "stop" if completion.finish_reason == "eos" else completion.finish_reason
    if structured.reply_is_call(completion.text, reason):
        completion.tool_calls = json.loads(structured.tool_calls_json(completion.text, False))
        completion.finish_reason = "tool_calls"


class ToolCallStream:
    """chat(stream=True)'s text pieces with tools offered, as `retnet serve` streams them: a
    reply that may be a call (every reply under a required or named tool_choice, one whose
    first byte is '{' under "auto") is held back; when it ends as a whole call it is not text
    (.result has .tool_calls), else it comes as one last piece. .result is the Completion once
    the iterator is exhausted, else None."""

    def __init__(self, stream, structured):
        self._stream = stream
        self._structured = structured
        self._holding = None  # None: no text yet
        self._held = ""
        self._done = False
        self.result = None

    def __iter__(self):
        return self

    def __next__(self):
        while not self._done:
            try:
                piece = next(self._stream)
            except StopIteration:
                self._done = True
                self.result = self._stream.result
                if self.result is not None:
                    _mark_call(self.result, self._structured)
                held, self._held = self._held, ""
                if held and (self.result is None or self.result.tool_calls is None):
                    return held
                break
            if self._holding is None and piece:
                self._holding = self._structured.tool_call or piece.startswith("{")
            if not self._holding:
                return piece
            self._held += piece
        raise StopIteration


Model.apply_chat_template = apply_chat_template
Model.chat = chat
