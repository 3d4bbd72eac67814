"""pycoop.autotune: the fastest configuration by timing launches, failures skipped and
reported, the choice remembered on disk per device."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

import pycoop as pc
from pycoop import f32, u32


@pc.kernel(workgroup_size=64)
def work(X: pc.Buffer[f32], n: u32, rounds: pc.Const = 1):
    i = pc.global_invocation_id.x
    if i < n:
        x = X[i]
        for r in range(rounds):                # traced `rounds` times: more work per config
            x = x * 1.0001 + 0.5
        X[i] = x


class _Timed(NamedTuple):
    time_ms: float
    backend: str


def run_on_emulator(calls):
    """Each configuration really launched; its time reported as its rounds of work, so the
    ranking cannot change with the machine's load (wall-clock times of 0.2 against 0.5 ms
    swapped under load)."""
    X = np.zeros(64 * 64, np.float32)

    def run(rounds, repeat):
        calls.append(rounds)
        if rounds < 0:
            raise pc.CompileError("no such configuration")
        r = work[64](X, X.size, rounds=rounds, backend="emulator", repeat=repeat)
        return _Timed(float(rounds), r.backend)
    return run


def test_the_fastest_configuration_wins_and_failures_are_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("PYCOOP_CACHE_DIR", str(tmp_path))
    calls = []
    r = pc.autotune([200, 1, -1, 60], run_on_emulator(calls), repeat=3)
    assert r.best == 1 and not r.cached
    assert set(r.times_ms) == {200, 1, 60} and r.times_ms[1] == min(r.times_ms.values())
    assert list(r.failures) == [-1] and "no such configuration" in r.failures[-1]
    assert calls == [200, 1, -1, 60]


def test_a_remembered_choice_skips_the_timing(monkeypatch, tmp_path):
    monkeypatch.setenv("PYCOOP_CACHE_DIR", str(tmp_path))
    calls = []
    first = pc.autotune([30, 1], run_on_emulator(calls), repeat=2, key="work 4096")
    again = pc.autotune([30, 1], run_on_emulator(calls), repeat=2, key="work 4096")
    assert first.best == again.best == 1 and again.cached and calls == [30, 1]
    other = pc.autotune([30, 1, 2], run_on_emulator(calls), repeat=2, key="work 4096")
    assert not other.cached                    # other configurations: timed again
    monkeypatch.setenv("PYCOOP_CACHE_DIR", "off")
    assert not pc.autotune([30, 1], run_on_emulator([]), repeat=2, key="work 4096").cached


def test_nothing_to_choose_from():
    with pytest.raises(ValueError, match="at least one"):
        pc.autotune([], lambda c, r: None)
    with pytest.raises(ValueError, match="distinct reprs"):
        pc.autotune([1, 1], lambda c, r: None)
    with pytest.raises(ValueError, match="must be hashable .* got a dict: {'t': 1}"):
        pc.autotune([{"t": 1}, {"t": 2}], lambda c, r: None)
    with pytest.raises(pc.PycoopError, match="no configuration ran") as e:
        pc.autotune([-1, -2], run_on_emulator([]))
    assert "-2: CompileError: no such configuration" in str(e.value)


def test_misuse_is_refused_before_any_timing():
    calls = []
    for configs in (None, 3, "ab"):
        with pytest.raises(pc.ArgumentError, match="configs is a sequence"):
            pc.autotune(configs, run_on_emulator(calls))
    with pytest.raises(ValueError, match="1 and 1.0 are equal"):     # one key of times_ms
        pc.autotune([1, 1.0], run_on_emulator(calls))
    for repeat in (0, 1.5, True, 5000):
        with pytest.raises(pc.ArgumentError, match="repeat must be an int from 1 to 4096"):
            pc.autotune([1, 2], run_on_emulator(calls), repeat=repeat)
    with pytest.raises(pc.ArgumentError, match="key is a string"):
        pc.autotune([1, 2], run_on_emulator(calls), key=b"work")
    with pytest.raises(pc.ArgumentError, match="run is a function"):
        pc.autotune([1, 2], None)
    assert calls == []


def test_run_must_return_the_launch_result():
    X = np.zeros(64, np.float32)

    def run(rounds, repeat):                   # the launch's result is not returned
        work[1](X, X.size, rounds=rounds, backend="emulator", repeat=repeat)
    with pytest.raises(pc.ArgumentError, match=r"run\(1, 2\) must return the launch's "
                                               r"LaunchResult .* got None"):
        pc.autotune([1, 2], run, repeat=2)


def test_times_of_two_backends_are_not_compared():
    # backend="auto" runs a configuration the device cannot run on the emulator: its wall time
    # is no device time, so it is reported as a failure rather than ranked
    r = pc.autotune([1, 2], lambda c, rep: _Timed(float(c), "vulkan" if c == 2 else "emulator"))
    assert r.best == 2 and list(r.times_ms) == [2] and "ran on the emulator" in r.failures[1]


@pytest.mark.parametrize("where", ["file", "long name", "damaged choices"])
def test_an_unusable_cache_keeps_the_result(monkeypatch, tmp_path, where):
    if where == "file":
        (tmp_path / "f").write_text("not a directory")
        monkeypatch.setenv("PYCOOP_CACHE_DIR", str(tmp_path / "f"))
    elif where == "long name":
        monkeypatch.setenv("PYCOOP_CACHE_DIR", str(tmp_path / ("x" * 300)))
    else:
        monkeypatch.setenv("PYCOOP_CACHE_DIR", str(tmp_path))
        pc.autotune([30, 1], run_on_emulator([]), repeat=1, key="work 4096")
        for f in (tmp_path / "autotune").glob("*.json"):
            f.write_text('{"choices": ["1"]}')
    r = pc.autotune([30, 1], run_on_emulator([]), repeat=1, key="work 4096")
    assert r.best == 1 and not r.cached        # timed, chosen, just not remembered
