"""Session: stepping, zero-copy views of logits and states, set_state, fork, save/load."""
import numpy as np
import pytest

import retnet

PROMPT = [72, 101, 108, 108, 111, 44, 32, 119]


def test_prefill_and_steps_match_model_logits(model):
    s = retnet.Session(model)
    b = s.add_sequence()
    s.prefill(b, PROMPT[:5])
    rows = [s.logits(b).copy()]
    for t in PROMPT[5:]:
        s.step([t])
        rows.append(s.logits(b).copy())
    expected = model.logits(PROMPT, form="recurrent")[0, 4:]
    np.testing.assert_allclose(np.stack(rows), expected, atol=2e-4, rtol=1e-4)
    assert s.position(b) == len(PROMPT)


def test_views_are_zero_copy(model):
    s = retnet.Session(model)
    s.add_sequence()
    s.prefill(0, PROMPT)
    state = s.state(0)
    logits = s.logits(0)
    assert state.size * 4 == model.state_bytes and state.flags.writeable
    assert not logits.flags.writeable
    with pytest.raises(ValueError):
        logits[0] = 1.0
    before_state, before_logits = state.copy(), logits.copy()
    s.step([33])
    # The same arrays now show the new state and logits: no new array was made.
    assert not np.array_equal(state, before_state)
    assert not np.array_equal(logits, before_logits)
    assert np.shares_memory(state, s.state(0))
    del s  # the views keep the session alive
    assert np.isfinite(state).all() and np.isfinite(logits).all()


def test_set_state_continues_as_the_original(model):
    s = retnet.Session(model, capacity=2)
    a, b = s.add_sequence(), s.add_sequence()
    s.prefill(a, PROMPT)
    s.prefill(b, [9] * len(PROMPT))  # another text, the same position (rotation angles)
    assert not np.array_equal(s.state(a), s.state(b))
    s.set_state(b, s.state(a))
    s.step([40, 40])
    np.testing.assert_array_equal(s.state(a), s.state(b))
    np.testing.assert_array_equal(s.logits(a), s.logits(b))


def test_fork_and_save_load_continue_identically(model, tmp_path):
    s = retnet.Session(model, capacity=3)
    for _ in range(3):
        s.add_sequence()
    s.prefill(0, PROMPT)
    s.fork(0, 1)
    path = str(tmp_path / "state.bin")
    s.save(path, 0)
    assert s.load(path, 2) == b""
    for t in [10, 20, 30]:
        s.step([t, t, t])
    np.testing.assert_array_equal(s.logits(0), s.logits(1))
    np.testing.assert_array_equal(s.logits(0), s.logits(2))
    assert s.position(2) == len(PROMPT) + 3


def test_sample_is_seeded_and_greedy_is_argmax(model):
    s = retnet.Session(model)
    s.add_sequence()
    s.prefill(0, PROMPT)
    assert s.sample(0, temperature=0) == int(np.argmax(s.logits(0)))
    draws = [s.sample(0, seed=5) for _ in range(3)]
    assert len(set(draws)) == 1  # keyed by (seed, stream, position): same position, same draw


def test_batched_steps_equal_single(model):
    s = retnet.Session(model, capacity=2)
    s.add_sequence(), s.add_sequence()
    s.prefill(0, PROMPT)
    s.prefill(1, PROMPT[:3])
    single = retnet.Session(model)
    single.add_sequence()
    single.prefill(0, PROMPT)
    for t in [3, 4, 5]:
        s.step([t, 7])
        single.step([t])
    np.testing.assert_allclose(s.logits(0), single.logits(0), atol=1e-5)
