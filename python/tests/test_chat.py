"""Model.apply_chat_template and Model.chat: the model's template as `retnet chat-template` (the
server's renderer) renders it, the server's stop strings, and the arguments' errors."""
import json
import subprocess

import pytest

import retnet

from conftest import run_cli

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
CHATML = ("{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
          "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
          "{% endif %}")


@pytest.fixture(scope="module")
def hf_dir(cli, model_path, tmp_path_factory):
    """The small model exported as a Hugging Face directory whose tokenizer_config.json holds a
    template of its own and special tokens."""
    out = tmp_path_factory.mktemp("chat") / "hf"
    run_cli(cli, "export", model_path, "--format", "syncdoth", "-o", out)
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.update(chat_template=CHATML, bos_token="<s>", eos_token={"content": "</s>"})
    config_path.write_text(json.dumps(config))
    return out


def cli_render(cli, tmp_path, messages, model=None, add_generation_prompt=True):
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(messages))
    args = [cli, "chat-template", "--messages", str(path)]
    if model is not None:
        args += ["--model", str(model)]
    if add_generation_prompt:
        args.append("--add-generation-prompt")
    return subprocess.run(args, check=True, capture_output=True).stdout.decode()


def test_default_template_renders_as_the_engine(cli, model, tmp_path):
    text = model.apply_chat_template(MESSAGES)
    assert text == cli_render(cli, tmp_path, MESSAGES)
    assert text == "<|system|>\nBe brief.<|end|>\n<|user|>\nHi!<|end|>\n<|assistant|>\n"
    no_prompt = model.apply_chat_template(MESSAGES, add_generation_prompt=False)
    assert no_prompt == cli_render(cli, tmp_path, MESSAGES, add_generation_prompt=False)
    assert not no_prompt.endswith("<|assistant|>\n")


def test_directory_template_and_special_tokens(cli, hf_dir, tmp_path):
    with retnet.load(str(hf_dir)) as m:
        text = m.apply_chat_template(MESSAGES)
        info = m._chat_template()
    assert text == cli_render(cli, tmp_path, MESSAGES, model=hf_dir)
    assert text.startswith("<s><|im_start|>system\nBe brief.<|im_end|>\n")
    assert info["stop"] == ["</s>"]  # the server's: the EOS token as text


def test_tokenize_and_template_variables(model):
    ids = model.apply_chat_template(MESSAGES, tokenize=True)
    assert ids == model.tokenizer.encode(model.apply_chat_template(MESSAGES))
    # Keywords are template variables, as transformers passes them (the default ignores them).
    assert model.apply_chat_template(MESSAGES, tools=[{"name": "f"}], date_string="x") == \
        model.apply_chat_template(MESSAGES)


def test_chat_is_generate_on_the_template_with_its_stops(model):
    prompt = model.apply_chat_template(MESSAGES)
    reply = model.chat(MESSAGES, max_tokens=12, seed=3, temperature=1.5)
    same = model.generate(prompt, max_tokens=12, seed=3, temperature=1.5, add_bos=False,
                          stop=["<|end|>"])
    assert isinstance(reply, retnet.Completion)
    assert (reply.text, reply.tokens, reply.finish_reason, reply.usage) == \
        (same.text, same.tokens, same.finish_reason, same.usage)
    assert reply.usage["prompt_tokens"] == len(model.tokenizer.encode(prompt))
    stream = model.chat(MESSAGES, max_tokens=12, seed=3, temperature=1.5, stream=True)
    assert "".join(stream) == reply.text
    assert stream.result.tokens == reply.tokens


def test_chat_stops_at_the_turn_end(model):
    # A first reply's text, cut where a stop string is asked for, is what chat gives when the
    # template's stop list holds that string: the stop strings reach generate.
    full = model.chat(MESSAGES, max_tokens=24, seed=5, temperature=2.0)
    cut = next(c for c in full.text[1:] if c.isascii())  # a byte model's text has U+FFFD too
    stopped = model.chat(MESSAGES, max_tokens=24, seed=5, temperature=2.0, stop=cut)
    assert stopped.finish_reason == "stop"
    assert stopped.text == full.text[:full.text.index(cut)]


@pytest.mark.parametrize("call, message", [
    (lambda m: m.apply_chat_template("hi"), "messages must be a list of dicts"),
    (lambda m: m.apply_chat_template([{"role": "user", "content": object()}]), "JSON values"),
    (lambda m: m.apply_chat_template(MESSAGES, add_generation_prompt="yes"),
     "add_generation_prompt must be a bool"),
    (lambda m: m.chat(MESSAGES, add_bos=True), "add_bos"),
    (lambda m: m.chat(MESSAGES, max_tokens="4"), "max_tokens must be an int"),
])
def test_wrong_arguments_are_type_errors(model, call, message):
    with pytest.raises(TypeError, match=message):
        call(model)


def test_bad_messages_are_engine_errors_naming_them(model):
    with pytest.raises(retnet.Error, match="role"):
        model.apply_chat_template([{"content": "no role"}])


def test_tokenize_without_a_tokenizer_is_an_engine_error():
    m = retnet.init({"decoder_layers": 1, "vocab_size": 100}, seed=1)  # too few for bytes
    assert m.apply_chat_template(MESSAGES).endswith("<|assistant|>\n")
    with pytest.raises(retnet.Error, match="no tokenizer"):
        m.apply_chat_template(MESSAGES, tokenize=True)
