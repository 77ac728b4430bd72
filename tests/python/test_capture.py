# SPDX-License-Identifier: Apache-2.0
"""pasa.capture and pasa.patch on a stand-in transformer. Skipped where torch is not installed."""

from __future__ import annotations

import json
import os
import pickle
import threading
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: capture/patch untested")
F = torch.nn.functional

import pasa  # noqa: E402


class SelfAttention(torch.nn.Module):
    """Calls F.scaled_dot_product_attention through the module attribute, as models do."""

    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.qkv = torch.nn.Linear(dim, (heads + 2 * kv_heads) * self.head_dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x, mask=None):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).split(
            [self.heads * self.head_dim, self.kv_heads * self.head_dim,
             self.kv_heads * self.head_dim], dim=-1)
        q = q.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        o = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=True)
        return self.out(o.transpose(1, 2).reshape(b, s, -1))


class Block(torch.nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, kv_heads)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 2 * dim), torch.nn.GELU(),
                                       torch.nn.Linear(2 * dim, dim))

    def forward(self, x, mask=None):
        x = x + self.attn(self.norm(x), mask)
        return x + self.mlp(x)


class TinyTransformer(torch.nn.Module):
    def __init__(self, dim=128, heads=2, kv_heads=1, layers=3):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(dim, heads, kv_heads) for _ in range(layers))

    def forward(self, x, mask=None):
        for block in self.blocks:
            x = block(x, mask)
        return x


@pytest.fixture
def model(rng):
    torch.manual_seed(int(rng.integers(2**62)))
    return TinyTransformer().eval()


@pytest.fixture
def x(rng):
    return torch.from_numpy(rng.standard_normal((2, 17, 128)).astype(np.float32))


def test_capture_records_every_call(tmp_path, model, x):
    original = F.scaled_dot_product_attention
    with torch.no_grad(), pasa.capture(tmp_path / "cap") as cap:
        assert F.scaled_dot_product_attention is not original
        y = model(x)
        model(x)
    assert F.scaled_dot_product_attention is original
    with torch.no_grad():
        torch.testing.assert_close(model(x), y, atol=0, rtol=0)  # capture changes nothing
    names = [e["name"] for e in cap.entries]
    assert names == [f"layer{i}" for i in range(6)]
    index = json.loads((tmp_path / "cap" / "index.json").read_text())
    assert index["pasa_version"] == pasa.__version__
    assert index["entries"] == cap.entries
    entry = index["entries"][0]
    assert entry["shape"] == {"q": [2, 2, 17, 64], "k": [2, 1, 17, 64], "v": [2, 1, 17, 64]}
    assert entry["dtype"] == "float32" and entry["is_causal"] and entry["enable_gqa"]
    assert entry["layer"] is None and entry["timestep"] is None and not entry["attn_mask"]
    t = pasa.load(tmp_path / "cap" / "layer0.safetensors")
    assert sorted(t) == ["k", "q", "v"]
    # The recorded q/k/v reproduce the layer: pasa on them equals the first block's attention.
    with torch.no_grad():
        block = model.blocks[0]
        qkv = block.attn.qkv(block.norm(x))
        q = qkv[..., :128].view(2, 17, 2, 64).transpose(1, 2)
    np.testing.assert_array_equal(t["q"], q.numpy())
    out = pasa.sdpa(t["q"], t["k"], t["v"], is_causal=True, enable_gqa=True)
    assert np.all(np.isfinite(out))


def test_a_capture_of_a_model_records_its_calls_only(tmp_path, model, x):
    # A pipeline's other attention (a text encoder's) ran outside `model` and was numbered too: the
    # model's calls were named two later than a patch of the model numbers them, so a calibrated
    # plan sent every call another call's policy.
    def encoder():
        F.scaled_dot_product_attention(x[:, None], x[:, None], x[:, None])

    with torch.no_grad(), pasa.capture(tmp_path, model=model) as cap:
        encoder()
        encoder()
        cap.timestep = 999
        model(x)
    assert [e["name"] for e in cap.entries] == [f"layer{i}_t999" for i in range(3)]
    assert all(e["layer"] is not None for e in cap.entries)
    plan = {"default": "exact", **{e["name"]: policy for e, policy in zip(cap.entries, ("fa16", "sage8", "pasa"))}}
    with torch.no_grad(), pasa.patch(model, plan=plan) as handle:
        handle.timestep = 999.0  # (a whole float names as the int the capture wrote)
        encoder()
        routed = []
        original_for = handle.policy_for
        handle.policy_for = lambda call: routed.append(original_for(call)) or routed[-1]
        model(x)
    assert routed == [str(pasa.Policy(p)) for p in ("fa16", "sage8", "pasa")]


def test_a_capture_of_a_model_stopped_by_ctrl_c_records_no_call_outside_it(tmp_path):
    # A KeyboardInterrupt inside a submodule (torch's hooks do not see it) left the layer stack holding
    # the model's own entry, so the stale stack was kept: a later call outside the model was recorded
    # as the interrupted submodule's.
    class Block(torch.nn.Module):
        def forward(self, y):
            return F.scaled_dot_product_attention(y, y, y)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Block(), Block()

        def forward(self, y):
            return self.b(self.a(y))

    net, y, stop = Net(), torch.randn(1, 2, 4, 8), [True]

    def interrupt_once(module, args):
        if stop[0]:
            stop[0] = False
            raise KeyboardInterrupt

    net.b.register_forward_pre_hook(interrupt_once)
    with torch.no_grad(), pasa.capture(tmp_path, model=net) as cap:
        with pytest.raises(KeyboardInterrupt):
            net(y)
        net(y)
        F.scaled_dot_product_attention(y, y, y)  # outside the model: not recorded
    assert [e["layer"] for e in cap.entries] == ["a", "a", "b"]


def test_capture_names_by_layer_and_timestep(tmp_path, model, x):
    def name(call):
        return f"t{call.timestep:02d}/{call.layer}"

    with torch.no_grad(), pasa.capture(tmp_path, model=model, name_fn=name) as cap:
        for cap.timestep in range(2):
            model(x)
    assert [e["name"] for e in cap.entries] == [
        f"t{t:02d}/blocks.{i}.attn" for t in range(2) for i in range(3)]
    assert [e["layer"] for e in cap.entries[:3]] == [f"blocks.{i}.attn" for i in range(3)]
    assert (tmp_path / "t01" / "blocks.2.attn.safetensors").is_file()
    # A scheduler's timesteps are NumPy or torch scalars: recorded as the numbers they hold (the
    # index was not written, and `pasa calibrate` then read the calls without their settings).
    steps = tmp_path / "steps"
    with torch.no_grad(), pasa.capture(steps) as cap:
        for cap.timestep in (np.int64(5), torch.tensor(999), np.float32(0.5), 998.0, torch.tensor(997.0)):
            F.scaled_dot_product_attention(x[:, None], x[:, None], x[:, None])
    index = json.loads((steps / "index.json").read_text())
    # (a whole float as an int: a flow-matching scheduler's 998.0 named layer3_t998.0, which
    # `pasa calibrate` refuses)
    assert [e["timestep"] for e in index["entries"]] == [5, 999, 0.5, 998, 997]
    assert [e["name"] for e in index["entries"]][3:] == ["layer3_t998", "layer4_t997"]
    with pytest.raises(pasa.PasaError, match=r"index\.json: not written"):
        with pasa.capture(tmp_path / "odd") as cap:
            cap.timestep = object()
            F.scaled_dot_product_attention(x[:, None], x[:, None], x[:, None])


def test_default_name_writes_a_whole_timestep_as_pasa_calibrate_reads_it():
    assert pasa.default_name(pasa.CallInfo(3, "blocks.3.attn", 999.0)) == "layer3_t999"
    assert pasa.default_name(pasa.CallInfo(3, "", np.float64(7.0))) == "layer3_t7"
    assert pasa.default_name(pasa.CallInfo(0, "", 0.5)) == "layer0_t0.5"
    assert pasa.default_name(pasa.CallInfo(2, "", None)) == "layer2"


def test_capture_restores_on_error_and_rejects_duplicates(tmp_path, model, x):
    original = F.scaled_dot_product_attention
    with pytest.raises(pasa.PasaError, match=r"name_fn: name 'same' of call 1 was already used"):
        with torch.no_grad(), pasa.capture(tmp_path, name_fn=lambda call: "same"):
            model(x)
    assert F.scaled_dot_product_attention is original
    with pytest.raises(pasa.PasaError, match=r"already holds a capture \(index.json\)"):
        with pasa.capture(tmp_path):
            pass
    with pasa.capture(tmp_path, overwrite=True):
        pass
    with pytest.raises(pasa.PasaError, match=r"name_fn: '../x' \(call 0\) is not a relative"):
        with torch.no_grad(), pasa.capture(tmp_path / "b", name_fn=lambda call: "../x"):
            model(x)
    # (a folder that cannot be made, call 0's file in its place: an OSError escaped)
    names = ["f", "f.safetensors/g", "h"]
    with pytest.raises(pasa.PasaError, match=r"name_fn: name 'f.safetensors/g' of call 1: cannot make its folder"):
        with torch.no_grad(), pasa.capture(tmp_path / "c", name_fn=lambda call: names[call.index]):
            model(x)
    assert F.scaled_dot_product_attention is original


def test_captures_ending_out_of_order_restore_torch(tmp_path):
    # Two captures that overlap without nesting (two threads' captures do): each records the calls
    # made while it is active, and torch's SDPA is back once both ended. (Each restored what it had
    # replaced, and the first to end left the other's recorder in place for good.)
    original = F.scaled_dot_product_attention
    q = torch.randn(1, 2, 8, 16)
    first, second = pasa.capture(tmp_path / "a"), pasa.capture(tmp_path / "b")
    first.__enter__()
    second.__enter__()
    F.scaled_dot_product_attention(q, q, q)
    first.__exit__(None, None, None)
    F.scaled_dot_product_attention(q, q, q)
    second.__exit__(None, None, None)
    assert F.scaled_dot_product_attention is original
    F.scaled_dot_product_attention(q, q, q)
    assert len(first.entries) == 1 and len(second.entries) == 2
    assert sorted(os.listdir(tmp_path / "a")) == ["index.json", "layer0.safetensors"]
    # A capture entered under a patch made inside another capture: the recorder under the router
    # took the router as what it wraps, and the two called each other for good.
    model = TinyTransformer().eval()
    with pasa.capture(tmp_path / "c") as outer, pasa.patch(model), pasa.capture(tmp_path / "d") as inner:
        F.scaled_dot_product_attention(q, q, q)
    assert F.scaled_dot_product_attention is original
    assert len(outer.entries) == 1 and len(inner.entries) == 1
    torch.testing.assert_close(F.scaled_dot_product_attention(q, q, q), original(q, q, q))


def test_capture_and_patch_flags_are_bools(tmp_path, model, x):
    # "False" is truthy: taken by its truth, overwrite="False" would delete the earlier capture's
    # files, and strict="False" would be strict.
    with torch.no_grad(), pasa.capture(tmp_path):
        model(x)
    before = sorted(p.name for p in tmp_path.iterdir())
    for bad in ("False", 0, None):
        with pytest.raises(pasa.PasaError, match=rf"^overwrite: expected True or False, got {bad!r}"):
            with pasa.capture(tmp_path, overwrite=bad):
                pass
        with pytest.raises(pasa.PasaError, match=rf"^strict: expected True or False, got {bad!r}"):
            pasa.patch(model, strict=bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_patched_module_calling_itself_routes_every_call():
    # (a wrapper whose forward runs the module again, guidance-style: the inner forward's exit
    # must not end the outer's routing)
    class Recursive(torch.nn.Module):
        def forward(self, x, depth=1):
            y = self(x, depth - 1) if depth > 0 else x
            return F.scaled_dot_product_attention(y, y, y)

    model, x = Recursive(), torch.randn(1, 1, 4, 8)
    with torch.no_grad(), pasa.patch(model, policy="sage4") as handle:
        got = model(x)
    y = pasa.attention(x, x, x, policy="sage4")
    assert handle.calls == 2 and handle.fallbacks == 0
    assert torch.equal(got, pasa.attention(y, y, y, policy="sage4"))
    # A decorated forward (here @torch.no_grad(), a wrapper functools.wraps made) whose module argument
    # is not named self: the outer calls' routing ended when the inner call returned (1 of 3 routed).
    class Decorated(torch.nn.Module):
        @torch.no_grad()
        def forward(this, x, depth=2):  # noqa: N805
            y = this(x, depth - 1) if depth > 0 else x
            return F.scaled_dot_product_attention(y, y, y)

    decorated = Decorated()
    with pasa.patch(decorated, policy="sage4") as handle:
        decorated(x)
    assert handle.calls == 3 and handle.fallbacks == 0


def test_capture_reset_restarts_numbering_as_the_patchs(tmp_path, model, x):
    with torch.no_grad(), pasa.capture(tmp_path) as cap:
        for step in (0, 10):
            cap.timestep = step
            cap.reset()
            model(x)
    names = [e["name"] for e in cap.entries]
    assert names == ["layer0_t0", "layer1_t0", "layer2_t0", "layer0_t10", "layer1_t10", "layer2_t10"], names


def test_a_capture_is_not_copied(tmp_path):
    import copy

    cap = pasa.capture(tmp_path)
    for duplicate in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(pasa.PasaError, match=r"a pasa.Capture cannot be copied or pickled"):
            duplicate(cap)


def test_write_index_only_inside_the_block(tmp_path):
    q = torch.randn(1, 1, 4, 8)
    first = pasa.capture(tmp_path)
    with pytest.raises(pasa.PasaError, match=r"index.json: not written: the capture is not running"):
        first.write_index()
    with first:
        F.scaled_dot_product_attention(q, q, q)
        first.write_index()  # (mid-block: the calls so far)
        assert len(json.loads((tmp_path / "index.json").read_text())["entries"]) == 1
        F.scaled_dot_product_attention(q, q, q)
    # A later capture of the directory: the first's index no longer describes its files.
    with pasa.capture(tmp_path, overwrite=True):
        F.scaled_dot_product_attention(torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16))
    with pytest.raises(pasa.PasaError, match=r"the capture is not running"):
        first.write_index()
    entries = json.loads((tmp_path / "index.json").read_text())["entries"]
    assert [e["shape"]["q"] for e in entries] == [[1, 2, 8, 16]], entries


def test_capture_refusals_at_the_call_and_at_entry(tmp_path):
    q = torch.randn(1, 1, 4, 8)
    # Two captures active on one directory would write one index over the other's.
    with pasa.capture(tmp_path):
        with pytest.raises(pasa.PasaError, match=r"is being written by another active capture"):
            with pasa.capture(tmp_path / ".", overwrite=True):
                pass
        F.scaled_dot_product_attention(q, q, q)
    assert len(json.loads((tmp_path / "index.json").read_text())["entries"]) == 1
    # A name_fn that itself calls SDPA: its calls are not the model's (they used to deadlock).
    def name_fn(call):
        F.scaled_dot_product_attention(q, q, q)
        return pasa.default_name(call)

    with pasa.capture(tmp_path / "named", name_fn=name_fn) as cap:
        F.scaled_dot_product_attention(q, q, q)
    assert [e["name"] for e in cap.entries] == ["layer0"]
    # A timestep index.json cannot hold is refused at the call, not when the block ends.
    with pasa.capture(tmp_path / "nan") as cap:
        cap.timestep = float("nan")
        with pytest.raises(pasa.PasaError, match=r"^timestep: nan is not a finite number"):
            F.scaled_dot_product_attention(q, q, q)
        cap.timestep = 1
        F.scaled_dot_product_attention(q, q, q)
    assert [e["name"] for e in cap.entries] == ["layer0_t1"]
    with pasa.capture(tmp_path / "meta"):
        with pytest.raises(pasa.PasaError, match=r"^query: a meta tensor"):
            F.scaled_dot_product_attention(*(q.to("meta"),) * 3)


def test_capture_overwrite_removes_the_earlier_capture(tmp_path, model, x):
    # Four calls, then two into the same directory: the first capture's layer2 and layer3 would
    # otherwise stay beside the new index (and `pasa calibrate` would not know them for stale).
    with torch.no_grad():
        with pasa.capture(tmp_path):
            model(x)
            F.scaled_dot_product_attention(x[:, None], x[:, None], x[:, None])
        files = sorted(p.name for p in tmp_path.glob("*.safetensors"))
        assert files == [f"layer{i}.safetensors" for i in range(4)]
        (tmp_path / "notes.safetensors").write_bytes(b"not the capture's")  # not in the index: kept
        with pasa.capture(tmp_path, overwrite=True):
            F.scaled_dot_product_attention(x[:, None], x[:, None], x[:, None])
            F.scaled_dot_product_attention(x[:, None], x[:, None], x[:, None], is_causal=True)
    assert sorted(p.name for p in tmp_path.glob("*.safetensors")) == [
        "layer0.safetensors", "layer1.safetensors", "notes.safetensors"]
    index = json.loads((tmp_path / "index.json").read_text())
    assert [e["name"] for e in index["entries"]] == ["layer0", "layer1"]
    assert [e["is_causal"] for e in index["entries"]] == [False, True]
    # Another tool's index.json: only the index is replaced, the files it names stay.
    other = tmp_path / "other"
    other.mkdir()
    (other / "weights.safetensors").write_bytes(b"someone else's")
    (other / "index.json").write_text(json.dumps({"entries": [{"file": "weights.safetensors"}]}))
    with pasa.capture(other, overwrite=True):
        pass
    assert (other / "weights.safetensors").exists()
    # One handle, two blocks: the second replaces the first, its index lists only its own files.
    again = tmp_path / "again"
    handle = pasa.capture(again, overwrite=True)
    with torch.no_grad():
        for calls in (2, 1):
            with handle:
                for _ in range(calls):
                    F.scaled_dot_product_attention(x[:, None], x[:, None], x[:, None])
    index = json.loads((again / "index.json").read_text())
    assert [e["file"] for e in index["entries"]] == ["layer0.safetensors"]
    assert sorted(p.name for p in again.glob("*.safetensors")) == ["layer0.safetensors"]


def test_capture_index_is_strict_json_and_its_errors_are_pasa_errors(tmp_path):
    q = torch.randn(1, 1, 4, 8)
    with pasa.capture(tmp_path / "a"):
        F.scaled_dot_product_attention(q, q, q, scale=float("nan"))
    text = (tmp_path / "a" / "index.json").read_text()
    strict = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
    assert strict["entries"][0]["scale"] == "nan"
    (tmp_path / "file").write_text("")
    with pytest.raises(pasa.PasaError, match=r"^directory: cannot create .*file"):
        with pasa.capture(tmp_path / "file"):
            pass
    # An error inside the block is the one raised, even when the index cannot be written either.
    target = tmp_path / "b"
    with pytest.raises(RuntimeError, match="the model failed"):
        with pasa.capture(target):
            F.scaled_dot_product_attention(q, q, q)
            (target / "index.json").mkdir()  # (the index's rename then fails)
            raise RuntimeError("the model failed")
    assert not list(target.glob("index.json.tmp-*"))
    with pytest.raises(pasa.PasaError, match=r"index.json: is a directory.*the index is not written"):
        with pasa.capture(tmp_path / "c"):
            (tmp_path / "c" / "index.json").mkdir()


def test_capture_3d_bf16_and_float64(tmp_path):
    q = torch.randn(3, 5, 16, dtype=torch.bfloat16)
    q64 = torch.randn(1, 2, 5, 16, dtype=torch.float64)
    q2 = torch.randn(5, 16)  # (L, E): torch takes it; recorded as [1, 1, L, E]
    with pasa.capture(tmp_path) as cap:
        F.scaled_dot_product_attention(q, q, q)
        F.scaled_dot_product_attention(q64, q64, q64, scale=0.5)
        F.scaled_dot_product_attention(q2, q2, q2)
    assert cap.entries[2]["shape"]["q"] == [1, 1, 5, 16]
    # (3-D operands are [H, L, E] to torch's GQA: recorded as one batch of H heads)
    assert cap.entries[0]["shape"]["q"] == [1, 3, 5, 16] and cap.entries[0]["dtype"] == "bfloat16"
    t = pasa.load(tmp_path / "layer0.safetensors")
    assert t["q"].dtype == np.float32  # bf16 loads as float32, exactly
    np.testing.assert_array_equal(t["q"][0], q.float().numpy())
    assert cap.entries[1]["converted_from"] == "float64" and cap.entries[1]["scale"] == 0.5


def test_3d_grouped_query_calls_are_heads_as_torch_reads_them(tmp_path):
    # torch groups dim -3 of 3-D operands: q [H_q, L, E] against k, v [H_kv, S, E]. pasa.sdpa, the
    # patch and the capture read them so (they were taken for batches, and refused as a broadcast).
    q, k, v = torch.randn(4, 6, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 8)
    want = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(pasa.sdpa(q, k, v, enable_gqa=True), want, atol=1e-5, rtol=1e-5)
    with pytest.raises(pasa.PasaError, match=r"^key: 2 heads differ from query's 4; pass enable_gqa=True"):
        pasa.sdpa(q, k, v)

    class M(torch.nn.Module):
        def forward(self, x):
            return F.scaled_dot_product_attention(x, k, v, enable_gqa=True)

    model = M()
    with torch.no_grad():
        pasa.stats(reset=True)
        with pasa.patch(model, strict=True):
            torch.testing.assert_close(model(q), want, atol=1e-5, rtol=1e-5)
        with pasa.capture(tmp_path):
            model(q)
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["entries"][0]["shape"] == {"q": [1, 4, 6, 8], "k": [1, 2, 7, 8], "v": [1, 2, 7, 8]}


def test_patch_routes_sdpa_through_pasa(model, x, monkeypatch):
    calls = []
    real_sdpa = pasa._capture.sdpa

    def spy(*args, **kwargs):
        calls.append(kwargs["policy"])
        return real_sdpa(*args, **kwargs)

    monkeypatch.setattr(pasa._capture, "sdpa", spy)
    original = F.scaled_dot_product_attention
    with torch.no_grad():
        want = model(x)
        with pasa.patch(model, policy="exact") as handle:
            got = model(x)
            F.scaled_dot_product_attention(x[:, None], x[:, None], x[:, None])  # outside: torch
    assert F.scaled_dot_product_attention is original
    assert calls == ["exact"] * 3 and handle.calls == 3
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


def test_patch_low_precision_policy_stays_close(model, x):
    with torch.no_grad():
        want = model(x)
        with pasa.patch(model, policy=pasa.Policy("pasa")):
            got = model(x.half().float())
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, atol=0.05, rtol=0)


def test_patch_with_plan(tmp_path, model, x, monkeypatch):
    seen = []
    real_sdpa = pasa._capture.sdpa
    monkeypatch.setattr(pasa._capture, "sdpa",
                        lambda *a, **kw: seen.append(kw["policy"]) or real_sdpa(*a, **kw))
    plan = {"layer1": "pasa", "default": "fa16"}
    with torch.no_grad(), pasa.patch(model, plan=plan) as handle:
        model(x)
        handle.reset()
        model(x)
    assert seen == ["fa16", "pasa", "fa16"] * 2

    seen.clear()
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"default": "exact",
                                "policies": {"blocks.1.attn": "pasa,s2=64"}}))
    with torch.no_grad(), pasa.patch(model, plan=path, name_fn=lambda c: c.layer):
        model(x)
    assert seen == ["exact", "pasa,s2=64", "exact"]


def test_a_plan_drops_only_a_timestep_suffix(model):
    # "<name>_t<timestep>" falls back to "<name>"'s entry; a name that merely contains "_t" does not.
    plan = {"attn": "fa16", "layer2": "pasa", "default": "exact"}
    with pasa.patch(model, plan=plan, name_fn=lambda c: c.layer) as handle:
        assert handle.policy_for(pasa.CallInfo(1, "attn_text", None)) == "exact"
        assert handle.policy_for(pasa.CallInfo(1, "attn_t7", 7)) == "fa16"
        assert handle.policy_for(pasa.CallInfo(1, "attn_t-1", -1)) == "fa16"
        assert handle.policy_for(pasa.CallInfo(1, "attn_tx", None)) == "exact"
        assert handle.policy_for(pasa.CallInfo(1, "attn_t999.0", 999.0)) == "fa16"  # (a float scheduler's)
    with pasa.patch(model, plan=plan) as handle:
        assert handle.policy_for(pasa.CallInfo(2, "blocks.2.attn", 30)) == "pasa"  # (layer2_t30)


def test_patch_with_a_calibrate_plan(tmp_path, model, x, monkeypatch):
    # The JSON `pasa calibrate` writes: (layer, timestep) entries, the fast policy as the default.
    seen = []
    real_sdpa = pasa._capture.sdpa
    monkeypatch.setattr(pasa._capture, "sdpa",
                        lambda *a, **kw: seen.append(kw["policy"]) or real_sdpa(*a, **kw))
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"fast": "fa16", "accurate": "exact", "xi": 30, "entries": [
        {"layer": 0, "timestep": 7, "policy": "exact", "score": 0.5},
        {"layer": 2, "timestep": None, "policy": "pasa"}]}))
    with torch.no_grad(), pasa.patch(model, plan=path) as handle:
        handle.timestep = 7
        model(x)           # layer0_t7 (exact), layer1_t7 (default), layer2_t7 (layer2's entry)
        handle.reset()
        handle.timestep = 8
        model(x)           # layer0_t8 has no entry: the default
    assert seen == ["exact", "fa16", "pasa", "fa16", "fa16", "pasa"]


def test_patch_errors(model, x):
    with pytest.raises(pasa.PasaError, match=r"^plan: give policy= or plan=, not both"):
        pasa.patch(model, policy="exact", plan={})
    with pytest.raises(pasa.PasaError, match=r"^plan: entry 'layer0': unknown policy 'x'"):
        pasa.patch(model, plan={"layer0": "x"})
    with pytest.raises(pasa.PasaError, match=r"^module: expected a torch.nn.Module"):
        pasa.patch(lambda x: x)
    with pytest.raises(pasa.PasaError, match=r"unknown policy 'nope'"):
        pasa.patch(model, policy="nope")
    with pasa.patch(model, plan={"layer0": "exact"}):
        with pytest.raises(pasa.PasaError, match=r"^plan: no policy for call 'layer1'"):
            with torch.no_grad():
                model(x)
    assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention


def test_a_patch_stopped_by_ctrl_c_routes_nothing_once_removed(model, x):
    # torch runs always_call forward hooks on Exception only: a KeyboardInterrupt inside the patched
    # forward left the patch on the routing stack, and calls of other modules went through it after
    # it was removed (while another patch kept the router installed).
    class Interrupted(torch.nn.Module):
        def forward(self, q):
            F.scaled_dot_product_attention(q, q, q)
            raise KeyboardInterrupt

    interrupted, q = Interrupted(), torch.randn(1, 2, 8, 16)
    with torch.no_grad():
        with pytest.raises(KeyboardInterrupt):
            with pasa.patch(interrupted, policy="fa16") as stopped:
                interrupted(q)
        assert stopped.calls == 1
        with pasa.patch(model):  # (keeps the router installed)
            got = F.scaled_dot_product_attention(q, q, q)  # outside every patched module: torch's
    assert stopped.calls == 1
    torch.testing.assert_close(got, torch._C._nn.scaled_dot_product_attention(q, q, q), atol=0, rtol=0)


def test_a_removed_patch_refuses_another_with_block(model, x):
    # Its hooks are gone: a second with block of the handle would route nothing, silently.
    handle = pasa.patch(model, policy="fa16")
    with handle, torch.no_grad():
        model(x)
    assert handle.calls > 0
    with pytest.raises(pasa.PasaError, match=r"^patch: this patch was removed"):
        with handle:
            pass
    assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention


def test_patch_runs_masks_on_the_cpu(model, x):
    mask = torch.ones(17, 17, dtype=torch.bool).tril()
    with torch.no_grad():
        want = model(x, mask)
        with pasa.patch(model) as handle:
            got = model(x, mask)
    assert handle.calls == 3 and handle.fallbacks == 0
    # exact policy: float32 throughout, against torch's float32 SDPA through three blocks.
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_plan_files_are_read_as_strictly_as_the_cpp_reader_reads_them(tmp_path, model):
    for text, match in (('{"layer0": "exact", "layer0": "sage8"}', r"duplicate key 'layer0'"),
                        ('{"default": "exact", "policies": {"layer0": "sage8"}, "layer1": "sage8"}',
                         r"'layer1' beside 'policies'"),
                        ('{"fast": "exact", "accurate": "sage8", "xi": 10}', r'missing "entries"'),
                        ('{"entries": [], "accurate": "exact", "xi": 10, "fast": "exact", "x": 1}',
                         r"unknown key 'x'")):
        path = tmp_path / "plan.json"
        path.write_text(text)
        with pytest.raises(pasa.PasaError, match=match):
            pasa.patch(model, plan=path)


def test_each_cause_of_a_fallback_is_warned_once():
    # Two causes that name the same argument (q past fp16, then q's head dim not contiguous) are two
    # warnings; the first cause again at other values is none.
    class Attend(torch.nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v)

    model, q = Attend(), torch.randn(1, 2, 8, 16)
    strided = torch.randn(1, 2, 16, 8).transpose(-1, -2)
    pasa.stats(reset=True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with torch.no_grad(), pasa.patch(model, policy="fa16"):
            model(q * 1e5, q, q)
            model(q * 2e5, q, q)
            model(strided, q, q)
    messages = [str(w.message) for w in record if w.category is pasa.PasaFallbackWarning]
    assert len(messages) == 2 and "head dim is not contiguous" in messages[1], messages
    assert pasa.stats()["reasons"] == {"q": 3}


def test_patch_falls_back_and_counts(model, x):
    pasa.stats(reset=True)
    with torch.no_grad():
        want = model(x)
    x64 = x.double()
    model64 = TinyTransformer().double().eval()
    with torch.no_grad():
        want64 = model64(x64)
        with pytest.warns(pasa.PasaFallbackWarning, match=r"dtype: torch.float64") as record:
            with pasa.patch(model64) as handle:
                got64 = model64(x64)
                model64(x64)
    assert len(record) == 1  # warned once for the reason, not once per call
    assert record[0].filename == __file__  # at the model's attention call, not inside pasa
    assert handle.fallbacks == 6 and handle.calls == 0
    torch.testing.assert_close(got64, want64, atol=0, rtol=0)
    counts = pasa.stats()
    assert counts["fallbacks"] == 6 and counts["calls"] == 0
    assert list(counts["reasons"]) == ["dtype"]
    with torch.no_grad(), pasa.patch(model) as handle:
        torch.testing.assert_close(model(x), want, atol=1e-5, rtol=1e-5)
    assert pasa.stats()["calls"] == 3
    with pasa.patch(model64, strict=True):
        with pytest.raises(pasa.PasaError, match=r"dtype: torch.float64 .*strict=True"):
            with torch.no_grad():
                model64(x64)
    assert pasa.stats(reset=True)["fallbacks"] == 6 and pasa.stats()["fallbacks"] == 0


def test_a_fallback_that_torch_refuses_is_counted_on_the_handle_too():
    class Both(torch.nn.Module):
        def forward(self, q):  # a mask and is_causal together: torch itself raises
            return F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(5, 5, dtype=torch.bool),
                                                  is_causal=True, dropout_p=0.5)

    pasa.stats(reset=True)
    module = Both()
    with pasa.patch(module) as handle, pytest.warns(pasa.PasaFallbackWarning):
        with pytest.raises(RuntimeError):
            module(torch.zeros(1, 2, 5, 16))
    assert handle.fallbacks == pasa.stats()["fallbacks"] == 1 and handle.calls == 0


def test_a_compiled_patched_call_falls_back_on_what_its_shapes_tell():
    # torch allows V another head dim (MLA) and K / V a broadcast batch; pasa does not. Eager calls
    # fell back on pasa's error; compiled ones traced the op, whose fake output has q's shape.
    class Attend(torch.nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v)

    module = Attend()
    wide = torch.randn(1, 2, 5, 16)
    cases = [(torch.randn(1, 2, 5, 16), torch.randn(1, 2, 6, 16), torch.randn(1, 2, 6, 8)),
             (torch.randn(3, 2, 5, 16), torch.randn(1, 2, 6, 16), torch.randn(1, 2, 6, 16)),
             # what pasa's own checks refuse only when the graph runs: a size 0, a head dim that
             # is not contiguous
             (torch.randn(1, 2, 0, 16), torch.randn(1, 2, 6, 16), torch.randn(1, 2, 6, 16)),
             (wide.transpose(-1, -2).contiguous().transpose(-1, -2), wide, wide)]
    with torch.no_grad(), pasa.patch(module), warnings.catch_warnings():
        warnings.simplefilter("ignore", pasa.PasaFallbackWarning)
        for q, k, v in cases:
            torch._dynamo.reset()
            got = torch.compile(module, fullgraph=True)(q, k, v)
            torch.testing.assert_close(got, torch._C._nn.scaled_dot_product_attention(q, k, v))


def test_a_patched_call_with_a_symbolic_scale_compiles_with_fullgraph():
    # Under dynamic=True (or a second compile of a module with another float scale) the scale is a
    # symbolic float, which math.isfinite in pasa's checks could not trace: fullgraph failed.
    class Scaled(torch.nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale

        def forward(self, q):
            return F.scaled_dot_product_attention(q, q, q, scale=self.scale)

    q = torch.randn(1, 2, 5, 16)
    with torch.no_grad():
        for scale in (0.25, 0.3):
            module = Scaled(scale)
            with pasa.patch(module):
                got = torch.compile(module, backend="aot_eager", fullgraph=True, dynamic=True)(q)
            torch.testing.assert_close(got, torch._C._nn.scaled_dot_product_attention(q, q, q, scale=scale))
    torch._dynamo.reset()


def test_calls_torch_refuses_go_to_torch_and_nested_tensors_fall_back():
    # A positional scale, an int is_causal, q / k / v of two dtypes and a mask of a third: torch
    # refuses them, pasa ran them. A nested tensor crashed pasa's checks (it has no shape).
    q = torch.randn(1, 2, 5, 16)
    calls = {
        "positional scale": lambda: F.scaled_dot_product_attention(q, q, q, None, 0.0, False, 0.3),
        "int is_causal": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=1),
        "two dtypes": lambda: F.scaled_dot_product_attention(q.half(), q, q),
        "a float16 mask": lambda: F.scaled_dot_product_attention(q, q, q, attn_mask=torch.zeros(5, 5).half()),
    }

    class Run(torch.nn.Module):
        def forward(self, call):
            return call()

    module = Run()
    with torch.no_grad(), pasa.patch(module), warnings.catch_warnings():
        warnings.simplefilter("ignore", pasa.PasaFallbackWarning)
        for name, call in calls.items():
            with pytest.raises((TypeError, RuntimeError)):
                module(call)
        nested = torch.nested.nested_tensor([torch.randn(2, 5, 16), torch.randn(2, 7, 16)])
        want = torch._C._nn.scaled_dot_product_attention(nested, nested, nested)
        got = module(lambda: F.scaled_dot_product_attention(nested, nested, nested))
        for a, b in zip(got.unbind(), want.unbind()):
            torch.testing.assert_close(a, b)


def test_a_timestep_set_each_step_does_not_recompile_one_policy(model, x):
    # A patch of one policy (or a plan of only a default) reads neither the numbering nor the
    # timestep: set each denoising step, they recompiled every step until Dynamo's limit.
    for options in ({"policy": "exact"}, {"plan": {"default": "exact"}}):
        torch._dynamo.reset()
        with torch.no_grad(), pasa.patch(model, **options) as handle:
            compiled = torch.compile(model, fullgraph=True)
            for step in range(3):
                handle.timestep = step
                compiled(x)
            with torch._dynamo.config.patch(error_on_recompile=True):
                for step in range(3, 12):
                    handle.timestep = step
                    compiled(x)
    torch._dynamo.reset()


def test_a_patched_model_with_name_fn_and_a_policy_compiles_once(model, x):
    # name_fn names calls for a plan; with a fixed policy nothing is looked up by name, so tracing
    # numbers no call (a traced count recompiled every call).
    torch._dynamo.reset()
    with torch.no_grad(), pasa.patch(model, policy="exact", name_fn=lambda call: f"c{call.index}"):
        compiled = torch.compile(model, fullgraph=True)
        for _ in range(3):
            compiled(x)
        with torch._dynamo.config.patch(error_on_recompile=True):
            for _ in range(12):
                compiled(x)


def test_a_patched_model_compiles_with_fullgraph_once(model, x):
    # Traced into one graph, compiled once: routed calls keep no counts while Dynamo traces them
    # (a traced count would be replayed as a constant and guarded on, recompiling every call).
    torch._dynamo.reset()
    pasa.stats(reset=True)
    with torch.no_grad():
        want = model(x)
        with pasa.patch(model) as handle:
            compiled = torch.compile(model, fullgraph=True)
            for _ in range(3):  # (the first calls may recompile once, as a thread's state appears)
                got = compiled(x)
            with torch._dynamo.config.patch(error_on_recompile=True):
                for _ in range(12):
                    got = compiled(x)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        assert handle.calls == 0 and pasa.stats()["calls"] == 0
        model64 = TinyTransformer().double().eval()
        with pasa.patch(model64) as handle:
            torch.testing.assert_close(torch.compile(model64, fullgraph=True)(x.double()),
                                       model64(x.double()))  # the fallback inside the graph
    torch._dynamo.reset()


class BiasedAttention(torch.nn.Module):
    """Self-attention of one head whose additive mask is a learned bias."""

    def __init__(self, seq: int):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(seq, seq))

    def forward(self, t):
        return F.scaled_dot_product_attention(t[:, None], t[:, None], t[:, None], attn_mask=self.bias)


def test_patch_falls_back_for_autograd_and_pasa_errors(model, x):
    pasa.stats(reset=True)  # warnings come once per reason since the last reset
    x = x.clone().requires_grad_(True)
    with pytest.warns(pasa.PasaFallbackWarning, match="autograd"):
        with pasa.patch(model) as handle:
            model(x).sum().backward()  # torch's SDPA, so the gradient exists
    assert handle.fallbacks == 3 and x.grad is not None
    # A learned additive bias (the mask) requiring grad, the inputs not: torch too, or backward fails.
    layer = BiasedAttention(x.shape[1])
    with pasa.patch(layer) as handle:
        layer(x.detach()).sum().backward()
    assert handle.fallbacks == 1 and layer.bias.grad is not None
    # What only pasa's own checks find (here: non-finite values, which the CPU backends reject)
    # also falls back; torch then computes what it computes (NaN here).
    bad = x.detach().clone()
    bad[0, 3, 5] = float("inf")
    with torch.no_grad(), pytest.warns(pasa.PasaFallbackWarning, match="non-finite value"):
        with pasa.patch(model) as handle:
            model(bad)
    assert handle.fallbacks >= 1


class DiTBlock(torch.nn.Module):
    """A DiT-style block: adaLN modulation from a timestep embedding, joint attention over image
    and text tokens (MM-DiT), text padding masked, through F.scaled_dot_product_attention."""

    def __init__(self, dim=64, heads=4):
        super().__init__()
        self.heads = heads
        self.ada = torch.nn.Linear(dim, 2 * dim)
        self.norm = torch.nn.LayerNorm(dim, elementwise_affine=False)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, image, text, text_keep, t_embedding):
        shift, scale = self.ada(t_embedding)[:, None].chunk(2, dim=-1)
        tokens = torch.cat([text, image], dim=1)
        h = self.norm(tokens) * (1 + scale) + shift
        b, n, d = h.shape
        q, k, v = (t.view(b, n, self.heads, d // self.heads).transpose(1, 2)
                   for t in self.qkv(h).chunk(3, dim=-1))
        keep = torch.cat([text_keep, torch.ones(b, image.shape[1], dtype=torch.bool)], dim=1)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        tokens = tokens + self.out(o.transpose(1, 2).reshape(b, n, d))
        return tokens[:, text.shape[1]:]


def test_patch_runs_a_dit_block(rng):
    torch.manual_seed(int(rng.integers(2**62)))
    block = DiTBlock().eval()
    image = torch.randn(2, 24, 64)
    text = torch.randn(2, 7, 64)
    text_keep = torch.ones(2, 7, dtype=torch.bool)
    text_keep[1, 4:] = False  # the second prompt is shorter: padding
    t_embedding = torch.randn(2, 64)
    with torch.no_grad():
        want = block(image, text, text_keep, t_embedding)
        with pasa.patch(block, policy="exact") as handle:
            got = block(image, text, text_keep, t_embedding)
        with pasa.patch(block, policy="fa16") as low:
            got16 = block(image, text, text_keep, t_embedding)
    assert handle.calls == 1 and handle.fallbacks == 0 and low.calls == 1
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # fa16: fp16 at S, P and O; the residual keeps the error at fp16's unit roundoff scale.
    assert (got16 - want).abs().max() < 64 * 2.0**-11 * want.abs().max()


def test_capture_inside_patch(tmp_path, model, x):
    with torch.no_grad(), pasa.patch(model, policy="fa16") as handle:
        with pasa.capture(tmp_path) as cap:
            model(x)
    assert len(cap.entries) == 3 and handle.calls == 3
    assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention
    # The patch removed while the capture runs: the capture's exit restores torch's function, not
    # the router it found (which stayed installed with no patch).
    handle = pasa.patch(model)
    with pasa.capture(tmp_path / "second"):
        handle.remove()
    assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention


def test_a_model_copied_inside_a_patch_is_routed_by_it(model, x):
    # copy.deepcopy copies the hooks, and with them the patch (which holds a module and a thread-local:
    # TypeError); an EMA copy made inside the `with` block is routed by the same patch instead.
    import copy

    with torch.no_grad():
        want = model(x)
        with pasa.patch(model, name_fn=lambda call: f"c{call.index}") as handle:
            twin = copy.deepcopy(model)
            got = twin(x)
        assert handle.calls == 3
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(twin(x), want, atol=1e-5, rtol=1e-5)  # (the patch removed: torch's)
    assert handle.calls == 3
    assert copy.copy(handle) is handle and copy.deepcopy(handle) is handle  # (one patch, one handle)


def test_patches_leave_nothing_routed_after_the_forward(model, x):
    q = torch.randn(1, 2, 5, 16)
    outside = lambda: F.scaled_dot_product_attention(q, q, q)  # noqa: E731
    with torch.no_grad():
        # Two patches of one module: the first's exit ran while the second was on top and left it
        # routing every later call of the thread.
        first, second = pasa.patch(model), pasa.patch(model, policy="fa16")
        for _ in range(3):
            model(x)
        counts = (first.calls, second.calls)
        outside()
        assert (first.calls, second.calls) == counts and second.calls == 9 and first.calls == 0
        first.remove()
        second.remove()

        # A forward stopped by a KeyboardInterrupt (which torch's hooks do not see) routes no more
        # once the module runs again.
        class Interrupted(torch.nn.Module):
            stop = True

            def forward(self, y):
                F.scaled_dot_product_attention(y, y, y)
                if self.stop:
                    raise KeyboardInterrupt
                return y

        module = Interrupted()
        with pasa.patch(module) as handle:
            with pytest.raises(KeyboardInterrupt):
                module(q)
            module.stop = False
            module(q)
            calls = handle.calls
            outside()
            assert handle.calls == calls == 2
        # Arguments torch refuses go to torch, which raises.
        with pasa.patch(module) as handle:
            for bad in (lambda: F.scaled_dot_product_attention(q, q, q, foo=1),
                        lambda: F.scaled_dot_product_attention(q, q, q, None, 0.0, False, 0.5, False, "x"),
                        lambda: F.scaled_dot_product_attention(q, q, q, None, attn_mask=None)):
                module.forward = lambda y, bad=bad: bad()
                with pytest.raises(TypeError):
                    module(q)
            assert handle.calls == 0


def test_a_patched_model_saved_whole_loads_unpatched(tmp_path, model, x):
    # The hooks held the patch, whose torch.nn.functional module pickle refused: a model could not be
    # saved while patched. It loads with hooks that route nothing; the original stays patched.
    with torch.no_grad(), pasa.patch(model, plan={"default": "exact"}) as handle:
        torch.save(model, tmp_path / "model.pt")
        copy = pickle.loads(pickle.dumps(model))
        want = model(x)
        assert handle.calls == 3
        pasa.stats(reset=True)
        loaded = torch.load(tmp_path / "model.pt", weights_only=False)
        for other in (copy, loaded):
            torch.testing.assert_close(other(x), want)
        assert handle.calls == 3 and pasa.stats()["calls"] == 0


def test_a_patch_replaced_inside_a_capture_keeps_both_working(tmp_path, model, x):
    # The capture records through the router; a patch made while it records kept it as "torch's
    # SDPA" and the two called each other forever.
    with torch.no_grad():
        handle = pasa.patch(model)
        with pasa.capture(tmp_path) as cap:
            model(x)
            handle.remove()
            handle = pasa.patch(model, policy="fa16")
            model(x)
        handle.remove()
        assert len(cap.entries) == 6 and handle.calls == 3
        q = torch.randn(1, 2, 5, 16)
        torch.testing.assert_close(F.scaled_dot_product_attention(q, q, q),
                                   torch._C._nn.scaled_dot_product_attention(q, q, q))


def test_patch_is_per_thread(model, x):
    other = TinyTransformer().eval()
    results = {}

    def run_other():
        with torch.no_grad():
            results["other"] = other(x)

    with torch.no_grad(), pasa.patch(model, policy="exact") as handle:
        thread = threading.Thread(target=run_other)
        thread.start()
        model(x)
        thread.join()
    assert handle.calls == 3  # the unpatched model's calls in the other thread went to torch
    with torch.no_grad():
        torch.testing.assert_close(results["other"], other(x), atol=0, rtol=0)
