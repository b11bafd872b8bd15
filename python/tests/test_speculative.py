"""generate(..., speculative=...): prompt lookup and a draft model give plain decoding's text
(greedy, and seeded sampling with lookup) on a retention and a hybrid model, usage counts the
drafted and accepted tokens, and wrong arguments are refused by name."""
import pytest

import retnet

HYBRID = {"decoder_embed_dim": 32, "decoder_value_embed_dim": 48, "decoder_retention_heads": 2,
          "decoder_ffn_embed_dim": 64, "decoder_layers": 2, "vocab_size": 256,
          "recurrent_chunk_size": 8, "mixer": ["retention", {"mixer": "attention", "heads": 2}]}

PROMPTS = ["First Citizen: Before we proceed any further, hear me speak.",
           "abc abc abc abc abc abc abc abc abc abc abc abc abc abc abc abc"]
LOOKUP = {"lookup": 3, "draft_max": 6}


@pytest.fixture(scope="module")
def hybrid():
    return retnet.init(HYBRID, seed=3)


def counts(completion):
    spec = completion.usage["speculative"]
    assert set(spec) == {"checks", "drafted_tokens", "accepted_tokens"}
    assert 0 <= spec["accepted_tokens"] <= spec["drafted_tokens"]
    assert spec["checks"] <= spec["drafted_tokens"]
    return spec


@pytest.mark.parametrize("which", ["retention", "hybrid"])
def test_lookup_gives_the_plain_text(which, model, hybrid):
    m = model if which == "retention" else hybrid
    accepted = 0
    for prompt in PROMPTS:
        for options in [dict(temperature=0), dict(temperature=0.9, seed=11)]:
            plain = m.generate(prompt, max_tokens=40, **options)
            fast = m.generate(prompt, max_tokens=40, speculative=LOOKUP, **options)
            assert fast == plain and fast.tokens == plain.tokens, (prompt, options)
            assert fast.finish_reason == plain.finish_reason
            assert "speculative" not in plain.usage
            accepted += counts(fast)["accepted_tokens"]
    assert accepted > 0, "the copy-heavy prompt keeps some drafts"


def test_draft_model_gives_the_greedy_text(model, hybrid):
    for prompt in PROMPTS:
        plain = hybrid.generate(prompt, max_tokens=30, temperature=0)
        fast = hybrid.generate(prompt, max_tokens=30, temperature=0,
                               speculative={"draft_model": model, "draft_max": 4})
        assert fast == plain and fast.tokens == plain.tokens, prompt
        assert counts(fast)["checks"] > 0
    own = hybrid.generate(PROMPTS[1], max_tokens=30, temperature=0,
                          speculative={"draft_model": hybrid})
    assert own == plain and counts(own)["accepted_tokens"] > 0  # it drafts its own tokens


def test_stream_and_openai_shapes_report_the_counts(model):
    stream = model.generate(PROMPTS[1], max_tokens=30, temperature=0, stream=True,
                            speculative=LOOKUP)
    text = "".join(stream)
    assert text == model.generate(PROMPTS[1], max_tokens=30, temperature=0)
    assert counts(stream.result)["checks"] > 0
    out = model.create_completion(PROMPTS[1], max_tokens=30, temperature=0, speculative=LOOKUP)
    assert out["choices"][0]["text"] == text
    # The same counts in the OpenAI shape. Not equal to the stream's: the draft length adapts to
    # how long each check took against a plain step, so two runs on a busy machine differ.
    spec = out["usage"]["speculative"]
    assert set(spec) == {"checks", "drafted_tokens", "accepted_tokens"}
    assert 0 < spec["checks"] <= spec["drafted_tokens"]
    assert 0 <= spec["accepted_tokens"] <= spec["drafted_tokens"]
    chat = model.chat([{"role": "user", "content": "abc abc abc"}], max_tokens=10,
                      temperature=0, speculative=LOOKUP)
    assert chat == model.chat([{"role": "user", "content": "abc abc abc"}], max_tokens=10,
                              temperature=0)
    counts(chat)


@pytest.mark.parametrize("value, error, match", [
    (3, TypeError, "speculative must be None or a dict"),
    ({"lookup": "3"}, TypeError, r"speculative\['lookup'\] must be an int"),
    ({"lookup": 3, "draft_max": 2.0}, TypeError, r"speculative\['draft_max'\] must be an int"),
    ({"draft_model": "small"}, TypeError, r"speculative\['draft_model'\] must be a retnet.Model"),
    ({"lookup": 3, "ngram": 2}, ValueError, "unknown key 'ngram'"),
    ({"draft_max": 4}, ValueError, "not neither"),
    ({"lookup": -1}, ValueError, r"speculative\['lookup'\] must be >= 1"),
    ({"lookup": 3, "draft_max": 0}, ValueError, r"speculative\['draft_max'\] must be >= 1"),
])
def test_wrong_arguments_are_named(model, value, error, match):
    with pytest.raises(error, match=match):
        model.generate("Hi", max_tokens=4, speculative=value)


def test_draft_model_must_share_the_vocabulary(model, hybrid):
    with pytest.raises(ValueError, match="not both"):
        model.generate("Hi", max_tokens=4, speculative={"lookup": 2, "draft_model": hybrid})
    other = retnet.init(dict(HYBRID, vocab_size=300), seed=1)
    with pytest.raises(retnet.Error, match="vocabulary of 300 tokens"):
        model.generate("Hi", max_tokens=4, speculative={"draft_model": other})
