# SPDX-License-Identifier: Apache-2.0
"""pasa.Policy: parse, print, presets, read-only fields."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import pasa


def test_presets():
    names = pasa.Policy.presets()
    assert {"exact", "fa16_fp32", "fa16", "pasa"} <= set(names)
    for name in names:
        policy = pasa.Policy.preset(name)
        assert str(policy) == name
        assert policy.preset_name == name
        assert pasa.Policy(name) == policy


def test_fields():
    exact = pasa.Policy("exact")
    assert exact.to_dict() == {
        "preset": "exact", "input": "fp32", "qk_acc": "fp32", "s": "fp32", "scale": "s",
        "softmax": "fp32", "exp_base": "e", "sum_acc": "fp32", "p": "fp32", "pv_acc": "fp32", "o": "fp32",
        "mma_k": 0, "shift": "none", "beta": 0.0, "pseudo_avg": "s", "reference": "max", "s1": 64, "s2": 64, "smooth_q": False, "smooth_k": False,
        "smooth_v": False, "q_quant": None, "k_quant": None, "q_gran": "thread",
        "k_gran": "thread", "v_quant": None, "p_scale": 1.0, "two_level": True, "pv_blocks": 1, "p_max": "block", "rowsum": "e", "phi": 0.0,
        "window_lo": -9.7, "window_hi": 10.0, "splits": 1,
    }
    p = pasa.Policy("pasa")
    assert (p.input, p.s, p.softmax, p.p, p.o) == ("fp16",) * 5
    assert (p.qk_acc, p.pv_acc) == ("fp32", "fp32")
    assert p.shift == "pasa" and p.scale == "k" and p.exp_base == "2"
    assert p.beta == pytest.approx(0.984497)
    assert (p.s1, p.s2) == (128, 128)


def test_every_preset_reads_every_field_from_the_cpp_table():
    keys = [f.key for f in pasa.Policy.fields()]
    assert len(keys) == len(set(keys)) == 34
    for f in pasa.Policy.fields():
        assert f.doc and (f.kind == "choice") == bool(f.choices)
    for name in pasa.Policy.presets():
        policy = pasa.Policy(name)
        values = policy.to_dict()
        assert list(values) == ["preset"] + keys
        for f in pasa.Policy.fields():
            if f.kind == "choice":
                assert values[f.key] in f.choices, (name, f.key)
        assert pasa.Policy.from_dict(values) == policy
        assert str(pasa.Policy.from_dict(values)) == name


def test_cpp_spellings_reach_python():
    fdpp = pasa.Policy("fdpp")
    assert fdpp.shift == "unified" and fdpp.splits == 1 and fdpp.phi == 0.0
    sage8 = pasa.Policy("sage8")
    assert sage8.pv_acc == "fp22" and sage8.q_quant == "int8" and sage8.v_quant == "e4m3"
    assert sage8.smooth_k is True and sage8.p_scale == 448.0 and sage8.two_level is True
    assert pasa.Policy("sage4").q_gran == "warp"
    assert pasa.Policy("pasa_accurate").pseudo_avg == "k"
    assert pasa.Policy("exact,pv_acc=e8m13").pv_acc == "fp22"


def test_dict_round_trip_of_changed_fields():
    policy = pasa.Policy("sage8,smooth_v=1,k_gran=block,v_quant=none,splits=2,p_scale=0.5")
    data = policy.to_dict()
    assert data["smooth_v"] is True and data["v_quant"] is None and data["p_scale"] == 0.5
    assert pasa.Policy.from_dict(data) == policy
    assert str(pasa.Policy.from_dict(data)) == str(policy)
    assert str(pasa.Policy.from_dict({"preset": "pasa", "s2": 64})) == "pasa,s2=64"
    with pytest.raises(pasa.PasaError, match="'preset' entry"):
        pasa.Policy.from_dict({"s2": 64})
    with pytest.raises(AttributeError, match="no field 'nope'"):
        pasa.Policy("exact").nope


def test_fields_are_read_only():
    p = pasa.Policy("pasa")
    with pytest.raises(AttributeError):
        p.beta = 0.5
    with pytest.raises(AttributeError):
        p.anything = 1


def test_text_round_trip():
    p = pasa.Policy.parse(" pasa , beta=0.968994 , s2=64 ")
    assert str(p) == "pasa,beta=0.968994,s2=64"
    assert p.beta == pytest.approx(0.968994) and p.s2 == 64
    assert pasa.Policy(str(p)) == p
    assert repr(p) == "pasa.Policy('pasa,beta=0.968994,s2=64')"
    q = pasa.Policy("exact,input=bf16,p=e4m3,scale=q")
    assert (q.input, q.p, q.scale) == ("bf16", "e4m3", "q")
    assert pasa.Policy(str(q)) == q


def test_replace():
    p = pasa.Policy("fa16").replace(s2=32, o="fp32")
    assert str(p) == "fa16,o=fp32,s2=32"
    with pytest.raises(pasa.PasaError, match="unknown key 'nope'"):
        pasa.Policy("fa16").replace(nope=1)
    # A field the policy already sets is changed, not given twice (which policy text refuses).
    assert str(p.replace(s2=64)) == "fa16,o=fp32,s2=64"
    with pytest.raises(pasa.PasaError, match="key 's2' is given twice"):
        pasa.Policy("fa16,s2=64,s2=128")
    with pytest.raises(pasa.PasaError, match="s2: '64,beta=0.5' is not one value of the field"):
        pasa.Policy("pasa").replace(s2="64,beta=0.5")
    # NumPy scalars, as NumPy computes a beta or a phi (quantiles, means): their values, not their reprs.
    assert pasa.Policy("pasa").replace(beta=np.float64(0.96875)).beta == 0.96875
    assert str(pasa.Policy("fdpp").replace(phi=np.float32(1.5), splits=np.int64(4))) == "fdpp,phi=1.5,splits=4"
    assert pasa.Policy.from_dict({"preset": "sage8", "smooth_k": np.bool_(False)}).smooth_k is False


def test_equality_hash_and_pickle():
    a = pasa.Policy("pasa,s2=64")
    b = pasa.Policy("pasa").replace(s2=64)
    assert a == b and hash(a) == hash(b)
    assert a == pasa.Policy("pasa,s1=128,s2=64") and hash(a) == hash(pasa.Policy("pasa,s1=128,s2=64"))
    assert a != pasa.Policy("pasa")
    assert len({a, b, pasa.Policy("exact")}) == 2
    assert pickle.loads(pickle.dumps(a)) == a
    assert pasa.Policy(a) == a

    # Immutable: a slot deleted could be set again, to a text that says another policy than the fields.
    with pytest.raises(AttributeError, match="_text cannot be deleted"):
        del a._text
    with pytest.raises(AttributeError, match=r"immutable; use policy.replace\(s2=...\)"):
        a.s2 = 32
    assert str(a) == "pasa,s2=64" and f"{a:>12}" == "  pasa,s2=64"


class Named(pasa.Policy):
    def __init__(self, text="exact", tag=None):
        super().__init__(text)
        self.tag = tag


def test_a_subclass_stays_one_and_keeps_its_own_attributes():
    import copy

    n = Named("pasa", tag="mine")
    assert n.tag == "mine" and n == pasa.Policy("pasa")
    for other in (pickle.loads(pickle.dumps(n)), copy.copy(n), copy.deepcopy(n), n.replace(s2=64),
                  Named.from_dict({"preset": "pasa"}), Named.preset("pasa")):
        assert type(other) is Named
    with pytest.raises(AttributeError, match="immutable"):
        n.s2 = 64  # (a field stays read-only in a subclass too)


def test_policies_equal_by_fields_never_to_text():
    # As C++'s operator==: the fields decide, not the preset a policy was written from, and equal
    # policies hash equal (a set or dict of policies holds one of them).
    b = pasa.Policy("fa16_fp32,softmax=fp16,o=fp16")
    assert b.to_dict() | {"preset": "fa16"} == pasa.Policy("fa16").to_dict()
    assert b == pasa.Policy("fa16") and hash(b) == hash(pasa.Policy("fa16"))
    assert len({b, pasa.Policy("fa16"), pasa.Policy("fa16_fp32")}) == 2
    # -0 and 0 are one value with two texts.
    for zero, minus_zero in (("fdpp", "fdpp,phi=-0"), ("pasa,beta=0", "pasa,beta=-0")):
        assert pasa.Policy(zero) == pasa.Policy(minus_zero) and hash(pasa.Policy(zero)) == hash(pasa.Policy(minus_zero))
    # A str is never equal, whatever its spelling (no hash could agree with all of them); a dict keyed
    # by text is looked up with str(policy).
    a = pasa.Policy("pasa,s2=64")
    for text in ("pasa,s2=64", "pasa,s1=128,s2=64", "not a policy"):
        assert a != text and not (a == text)
    assert {"exact": 1, "pasa,s2=64": 2}[str(a)] == 2


def test_bad_preset_name():
    with pytest.raises(pasa.PasaError, match=r"unknown policy 'sage9'"):
        pasa.Policy.preset("sage9")
    with pytest.raises(pasa.PasaError, match=r"^name: expected a preset name"):
        pasa.Policy.preset(3)


@pytest.mark.parametrize("text, message", [
    ("exact,s2=1e400", r"'s2': 1e400 is out of range \(must be in 1\.\.1024\)"),
    ("pasa,beta=1e400", r"'beta': 1e400 is out of range"),
    ("fdpp,phi=1e309", r"'phi': 1e309 is out of range"),
])
def test_numbers_past_a_double_are_out_of_range(text, message):
    with pytest.raises(pasa.PasaError, match=message):
        pasa.Policy(text)


def test_subnormal_numbers_are_their_values():
    assert pasa.Policy("pasa,beta=1e-310").beta == 1e-310
    assert pasa.Policy("fdpp,phi=1e-320").phi == 1e-320


@pytest.mark.parametrize("initial,optimal", [(1 - 2**-5, 0.968994), (1 - 2**-6, 0.984497)])
def test_beta_reproduces_the_presets(initial, optimal):
    solution = pasa.beta(initial)
    assert solution.initial == initial
    assert solution.beta == pytest.approx(optimal, abs=5e-7)
    assert solution.invariance == pytest.approx(solution.beta / (1 - solution.beta))
    assert solution.iterations >= 1
    # the pasa preset's beta is this fixed point
    assert pasa.Policy("pasa").beta == pytest.approx(pasa.beta().beta, abs=5e-7)


def test_beta_options_and_errors():
    assert pasa.beta(0.9, format="bf16", block=64).beta != pasa.beta(0.9).beta
    with pytest.raises(pasa.PasaError, match=r"^block: 1099511627776 is outside 1\.\.1024"):
        pasa.beta(block=2**40)  # (the policy's range of s2, not an int's)
    assert pasa.beta(scale=0.0883883).beta != pasa.beta().beta
    with pytest.raises(pasa.PasaError, match=r"initial value 1.5 is outside \(0, 1\)"):
        pasa.beta(1.5)
    with pytest.raises(pasa.PasaError, match=r"format int8 is not a float format"):
        pasa.beta(format="int8")
    with pytest.raises(pasa.PasaError, match=r"unknown number format 'fp9x'"):
        pasa.beta(format="fp9x")
    with pytest.raises(pasa.PasaError, match=r"^block: 0 is outside 1\.\.1024"):
        pasa.beta(block=0)
    # A scale that M cannot hold in fp16: the error says what M applies, not that the block is small.
    with pytest.raises(pasa.PasaError, match=r"rounded to fp16 applies beta = 1, outside \[0, 1\) "
                                             r"\(fp16 cannot hold this M at s2 = 128, scale 1e-30"):
        pasa.beta(scale=1e-30)
    with pytest.raises(pasa.PasaError, match=r"^block: expected an integer"):
        pasa.beta(block=1.5)
