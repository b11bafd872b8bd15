"""Tokenizer, training with a callback, and memory over many sessions."""
import os

import numpy as np
import pytest

import retnet
from conftest import SMALL


def test_byte_tokenizer_round_trip(model):
    t = model.tokenizer
    ids = t.encode("héllo")
    assert ids == list("héllo".encode())
    assert t.decode(ids) == "héllo"
    assert t.token_bytes(104) == b"h"
    assert t.decode(ids[:2]) == "h\ufffd"  # half a character
    assert t.eos_id is None and t.vocab_size == 256


def test_train_callback_stops_early_with_a_checkpoint(tmp_path):
    data = tmp_path / "data.txt"
    data.write_text("the quick brown fox jumps over the lazy dog. " * 300)
    seen = []

    def callback(metrics):
        seen.append(metrics)
        return metrics["step"] < 3

    out = tmp_path / "run"
    config = dict(SMALL, decoder_layers=1)
    r = retnet.train(str(data), config=config, out=str(out), steps=50, callback=callback,
                     batch=2, seq=32, log_interval=1, quiet=True)
    assert r["interrupted"] and r["stopped_by_callback"] and r["steps"] == 3
    assert r["model"] is None
    assert [m["step"] for m in seen] == [1, 2, 3]
    assert {"loss", "lr", "grad_norm"} <= set(seen[0]) and np.isfinite(seen[0]["loss"])
    assert any(name.startswith("checkpoint") for name in os.listdir(out))
    # Messages name Python's keywords, not the command line's flags.
    with pytest.raises(retnet.Error, match=r"continue it with resume=True, start over with "
                                           r"overwrite=True"):
        retnet.train(str(data), config=config, out=str(out), steps=5, batch=2, seq=32,
                     quiet=True)
    # Resuming finishes the run and writes the model.
    r = retnet.train(str(data), config=config, out=str(out), steps=5, batch=2, seq=32,
                     resume=True, quiet=True)
    assert not r["interrupted"] and r["steps"] == 5
    assert retnet.load(r["model"]).config["decoder_layers"] == 1


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_memory_growth_over_1000_sessions(model):
    def cycle():
        s = retnet.Session(model, capacity=2)
        s.add_sequence()
        s.prefill(0, [1, 2, 3])
        s.step([4])
        s.state(0)
        s.logits(0)
    for _ in range(50):
        cycle()
    before = rss_bytes()
    for _ in range(1000):
        cycle()
    grown = rss_bytes() - before
    # A leaked session would hold at least its logits and state (~4 KiB): 1,000 of them > 4 MB.
    assert grown < 2 * 2**20, grown
