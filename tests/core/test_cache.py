"""The disk cache of compiled SPIR-V is bounded: least recently used entries are evicted past
PYCOOP_CACHE_MAX_MB, a hit refreshes an entry, and `cache_stats` reports it."""
from __future__ import annotations

import json
import os

import pytest

import pycoop as pc
from pycoop import cache, f32, knobs

from pycoop.spirv.tools import validate


@pc.kernel(workgroup_size=64)
def scaled(x: pc.Buffer[f32], S: pc.Const = 1):
    i = pc.global_invocation_id.x
    x[i] = x[i] * float(S)


@pytest.fixture
def disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYCOOP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache, "_memory", {})
    return tmp_path


def _lower(s: int) -> bytes:
    cache._memory.clear()                       # only the disk is shared between these
    spv = cache.lower_cached(scaled.compile(S=s).module).spv
    validate(spv)
    return spv


def _entries(d):
    return sorted(d.glob("*.json"), key=lambda p: p.stat().st_mtime)


def test_eviction_keeps_the_recently_used(disk_cache, monkeypatch):
    _lower(1)
    [first] = _entries(disk_cache)
    size = first.stat().st_size
    monkeypatch.setenv("PYCOOP_CACHE_MAX_MB", str(2.5 * size / 2**20))   # room for two entries
    os.utime(first, (1, 1))                    # used long ago
    _lower(2)
    os.utime(_entries(disk_cache)[-1], (2, 2))
    assert len(_entries(disk_cache)) == 2
    _lower(1)                                   # a hit: refreshes entry 1
    assert first.stat().st_mtime > 2
    _lower(3)                                   # over the limit: entry 2 (least recent) goes
    names = {p.name for p in _entries(disk_cache)}
    assert first.name in names and len(names) == 2
    stats = cache.cache_stats()
    assert stats["dir"] == str(disk_cache) and stats["entries"] == 2
    assert stats["bytes"] == sum(p.stat().st_size for p in disk_cache.glob("*.json"))
    assert stats["bytes"] <= stats["max_bytes"]


def test_zero_limit_keeps_only_the_newest(disk_cache, monkeypatch, caplog):
    monkeypatch.setenv("PYCOOP_CACHE_MAX_MB", "0")
    with caplog.at_level("DEBUG", logger="pycoop.cache"):
        for s in (1, 2, 3):
            _lower(s)
    assert len(_entries(disk_cache)) == 1
    evicted = [r.getMessage() for r in caplog.records if "evicted" in r.getMessage()]
    assert len(evicted) == 2 and "limit 0" in evicted[0]


def test_cache_knobs(monkeypatch, tmp_path):
    monkeypatch.setenv("PYCOOP_CACHE_MAX_MB", "lots")
    with pytest.raises(ValueError, match="PYCOOP_CACHE_MAX_MB='lots'"):
        knobs.cache_max_bytes()
    monkeypatch.setenv("PYCOOP_CACHE_MAX_MB", "1.5")
    assert knobs.cache_max_bytes() == 3 * 2**19
    monkeypatch.delenv("PYCOOP_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    if knobs.sys.platform.startswith("linux"):
        assert knobs.cache_dir() == tmp_path / "pycoop"
    monkeypatch.setenv("PYCOOP_CACHE_DIR", "off")
    assert knobs.cache_dir() is None and cache.cache_stats()["dir"] is None
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PYCOOP_CACHE_DIR", "~/kernels")       # not a directory named "~"
    assert knobs.cache_dir() == tmp_path / "kernels"


def test_eviction_never_deletes_other_files(disk_cache, monkeypatch):
    # the cache directory may be shared with the user's own files, e.g. an exported kernel
    # and its sidecar: only pycoop's entries count against the limit and are evicted
    mine = [disk_cache / "k.spv.json", disk_cache / "package.json", disk_cache / "k.spv"]
    for p in mine:
        p.write_text("{}" + " " * 10000)
    monkeypatch.setenv("PYCOOP_CACHE_MAX_MB", "0")
    for s in (1, 2):
        _lower(s)
    assert all(p.exists() for p in mine)
    assert len(_entries(disk_cache)) == 3 and cache.cache_stats()["entries"] == 1


@pytest.mark.parametrize("damage", [
    "", "[]", "null", "3",                                        # not an entry at all
    {"spv": 5}, {"requirements": None}, {"abi": None},           # fields of the wrong type
    {"spv": "00" * 64}, {"spv": "03022307"},                      # garbage, truncated SPIR-V
])
def test_a_damaged_entry_is_rebuilt(disk_cache, damage):
    good = _lower(1)
    [entry] = _entries(disk_cache)
    text = entry.read_text()
    data = json.loads(text)
    entry.write_text(damage if isinstance(damage, str) else json.dumps({**data, **damage}))
    assert _lower(1) == good                   # never used, never a crash: rebuilt ...
    assert entry.read_text() == text           # ... and overwritten


def test_an_unusable_cache_directory_only_costs_recompiling(monkeypatch, tmp_path):
    monkeypatch.setattr(cache, "_memory", {})
    monkeypatch.setenv("PYCOOP_CACHE_DIR", str(tmp_path / ("x" * 300)))   # name too long
    assert _lower(1) and cache.cache_stats()["entries"] == 0
    (tmp_path / "c").mkdir()
    monkeypatch.setenv("PYCOOP_CACHE_DIR", str(tmp_path / "c"))
    cache._memory.clear()
    key = cache._key(scaled.compile(S=2).module)
    (tmp_path / "c" / f"{key}.json").mkdir()   # the entry's path is taken: nothing is stored
    assert _lower(2) and os.listdir(tmp_path / "c") == [f"{key}.json"]   # and no .tmp left
