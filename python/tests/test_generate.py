"""Generation: parity with `retnet generate`, streaming, batches, the GIL, Ctrl-C."""
import json
import signal
import threading
import time

import pytest

import retnet
from conftest import run_cli


def test_generate_matches_cli(model, model_path, cli):
    for seed, temperature in [(1, 0.8), (2, 0.0)]:
        out = run_cli(cli, "generate", "-m", model_path, "-p", "Hello", "-n", 40, "--seed", seed,
                      "--temperature", temperature, "--json")
        expected = json.loads(out)["text"]
        assert model.generate("Hello", max_tokens=40, seed=seed, temperature=temperature) == expected


def test_stream_gives_the_same_text(model):
    pieces = list(model.generate("Hello", max_tokens=30, seed=3, stream=True))
    assert len(pieces) > 1
    assert "".join(pieces) == model.generate("Hello", max_tokens=30, seed=3)


def test_batch_gives_each_prompt_its_solo_text(model):
    texts = model.generate_batch(["Hello", "Good"], max_tokens=20, seed=4)
    assert len(texts) == 2
    assert texts[0] == model.generate("Hello", max_tokens=20, seed=4)
    assert texts[1] == model.generate("Good", max_tokens=20, seed=4)


def test_stop_strings(model):
    text = model.generate("Hello", max_tokens=60, seed=5, temperature=0)
    stop = next(ch for ch in text[3:] if ch.isascii() and ch.isprintable())
    assert model.generate("Hello", max_tokens=60, seed=5, temperature=0,
                                   stop=stop) == text[:text.index(stop)]


def long_model():
    # Wide enough that 2,000 steps take seconds.
    return retnet.init({"decoder_embed_dim": 256, "decoder_layers": 4, "vocab_size": 256}, seed=1)


def test_gil_is_released_during_generate():
    m = long_model()
    count = 0
    stop = threading.Event()

    def counter():
        nonlocal count
        while not stop.is_set():
            count += 1
            time.sleep(0.001)

    t = threading.Thread(target=counter)
    t.start()
    time.sleep(0.01)
    before = count
    m.generate("Hello", max_tokens=500, seed=1, ignore_eos=True)
    during = count - before
    stop.set()
    t.join()
    # With the GIL held through the call the counter could not advance while it runs (0 or 1).
    assert during >= 10, during


@pytest.mark.parametrize("stream", [False, True])
def test_keyboard_interrupt_stops_generation(stream):
    m = long_model()
    timer = threading.Timer(0.3, lambda: signal.pthread_kill(threading.main_thread().ident,
                                                             signal.SIGINT))
    start = time.perf_counter()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        if stream:
            for _ in m.generate("Hello", max_tokens=100000, stream=True, ignore_eos=True):
                pass
        else:
            m.generate("Hello", max_tokens=100000, ignore_eos=True)
    timer.join()
    assert time.perf_counter() - start < 10


def test_dropping_a_stream_early_is_clean(model):
    it = model.generate("Hello", max_tokens=1000, stream=True, seed=1)
    next(it)
    del it
    assert model.generate("Hi", max_tokens=5, seed=1) is not None
