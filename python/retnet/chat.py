"""Model.apply_chat_template / Model.chat: conversations through the model's chat template.

The template is the one `retnet serve` and `retnet chat-template --model` use for the same model
(a Hugging Face directory's tokenizer_config.json or chat_template.jinja, else the default
template of the models trained here), rendered by the engine's Jinja renderer.
"""
import json

from ._retnet import Error, Model
from .generation import _bool, _fail, _stop, generate


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


def chat(self, messages, max_tokens=128, *, stop=None, stream=False, **options):
    """Answers a conversation: the prompt is apply_chat_template(messages) (tokenized with no
    BOS added) and generation stops where the template ends a turn (the default template's
    "<|end|>", else the model's EOS token), as `retnet serve` does for /v1/chat/completions.

    The other arguments are generate's (temperature, top_k, top_p, seed, max_new_tokens, ...).
    Returns a Completion (the reply's text with .tokens, .finish_reason and .usage), or a
    TextStream of text pieces with stream=True.
    """
    prompt = self._render_chat(_messages(messages), True, "{}")
    stops = list(self._chat_template()["stop"])
    extra = _stop(stop)
    stops += [extra] if isinstance(extra, str) else (extra or [])
    if "add_bos" in options:
        raise TypeError("chat() got an unexpected keyword argument 'add_bos' (the chat "
                        "template writes the BOS it wants)")
    return generate(self, prompt, max_tokens, stop=stops or None, stream=stream, add_bos=False,
                    **options)


Model.apply_chat_template = apply_chat_template
Model.chat = chat
