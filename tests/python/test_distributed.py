# SPDX-License-Identifier: Apache-2.0
"""pasa.distributed on the CPU: ring and all-gather attention over several gloo processes (the
emulator on each), against single-device pasa.attention on the gathered sequence, for every preset,
causal and not, contiguous (uneven) and zig-zag shards, GQA. Skipped where torch is not installed.

Tolerance: a sharded run is a float32 LSE-weighted average of partial results, each the same policy
on a subset of the keys, so its error against the fp64 reference is that of a single-device run
(the test allows twice the single-device error, measured on the same inputs) plus the roundings the
merge adds: each partial rounded to the policy's output format and the float32 merge, at most
2 u_o + 8 u_fp32 times max|V| (weights sum to 1).
"""

from __future__ import annotations

import datetime
import json
import os
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pasa.distributed untested")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("this torch has no torch.distributed", allow_module_level=True)

import pasa  # noqa: E402
from conftest import np_attention  # noqa: E402
from pasa import distributed as pd  # noqa: E402

SEED = 18
SEQ = 300
B, H_Q, H_KV, D = 1, 4, 2, 64
#: Uneven contiguous shard lengths (sum SEQ) per world size; zig-zag uses shard()'s rule.
LENGTHS = {2: [130, 170], 3: [90, 140, 70]}
U_FP32 = 2.0 ** -24


def unit_roundoff(fmt: str) -> float:
    named = {"fp32": 23, "fp16": 10, "bf16": 7, "fp22": 13}
    if fmt in named:
        return 2.0 ** -(named[fmt] + 1)
    match = re.fullmatch(r"e(\d+)m(\d+)", fmt)
    assert match, f"unknown format {fmt}"
    return 2.0 ** -(int(match.group(2)) + 1)


def make_inputs(seed: int):
    """Q, K, V [B, H, SEQ, D] with a key mean that grows along the sequence.

    Each shard then has its own score offset, so a merge that ignored a policy's shift (PASA's
    running mean) would weight the shards wrongly by far more than the tolerance.
    """
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H_Q, SEQ, D)) + 0.5
    ramp = np.linspace(0.0, 2.0, SEQ)[None, None, :, None]
    k = rng.standard_normal((B, H_KV, SEQ, D)) + ramp
    v = rng.standard_normal((B, H_KV, SEQ, D))
    return tuple(x.astype(np.float32) for x in (q, k, v))


def cases():
    for policy in pasa.Policy.presets():
        for causal in (False, True):
            for zigzag in (False, True):
                mask, shards = "causal" if causal else "full", "zigzag" if zigzag else "contig"
                yield f"{policy}-{mask}-{shards}"


def parse_case(name: str):
    policy, mask, shards = name.split("-")
    return policy, mask == "causal", shards == "zigzag"


def leave_group() -> None:
    """Every rank waits for the others before the group is torn down: a rank that closes its gloo
    connections while a peer is still finishing ended that peer in std::terminate ("terminate called
    without an active exception", SIGABRT) in about 1 run in 7 under the whole suite's load."""
    dist.barrier()
    dist.destroy_process_group()


def local_shard(x: torch.Tensor, rank: int, world: int, zigzag: bool) -> torch.Tensor:
    if zigzag:
        return pd.shard(x, rank, world, zigzag=True)
    start = sum(LENGTHS[world][:rank])
    return x[:, :, start:start + LENGTHS[world][rank]]


def worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        q, k, v = (torch.from_numpy(x) for x in make_inputs(SEED))
        results = {}
        for name in cases():
            policy, causal, zigzag = parse_case(name)
            ql, kl, vl = (local_shard(x, rank, world, zigzag) for x in (q, k, v))
            for fn in (pd.ring_attention, pd.allgather_attention):
                o, lse = fn(ql, kl, vl, policy=policy, causal=causal, zigzag=zigzag,
                            return_lse=True)
                results[(name, fn.__name__)] = (o, lse)
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        leave_group()


def run_world(world: int, tmp_path_factory):
    out_dir = str(tmp_path_factory.mktemp(f"world{world}"))
    init_file = os.path.join(out_dir, "rendezvous")
    torch.multiprocessing.spawn(worker, args=(world, init_file, out_dir), nprocs=world, join=True)
    per_rank = [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(world)]
    gathered = {}
    for key in per_rank[0]:
        zigzag = parse_case(key[0])[2]
        gathered[key] = tuple(pd.unshard([per_rank[r][key][i] for r in range(world)],
                                         zigzag=zigzag).numpy() for i in (0, 1))
    return gathered


def misuse_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    """Calls where the ranks disagree, or one rank's arguments or values are bad: each rank records its
    error (a rank left waiting would fail the test at the collectives' timeout instead)."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        q = torch.randn(1, 2, 8, 16)
        nan_on_rank_1 = q.clone()
        if rank == 1:
            nan_on_rank_1[0, 0, 3, 5] = float("nan")
        errors = {}
        scenarios = {
            "dtype": lambda: pd.ring_attention(*((q.half(),) * 3 if rank == 1 else (q,) * 3)),
            "policy": lambda: pd.allgather_attention(q, q, q, policy="exact" if rank == 0 else "fa16"),
            "one rank's flag": lambda: pd.ring_attention(q, q, q, causal="False" if rank == 1 else False),
            "head dim": lambda: pd.ring_attention(*((q[..., :8],) * 3 if rank == 1 else (q,) * 3)),
            # (the same scale as a Python and as a NumPy float: the ranks agree)
            "scale kinds": lambda: pd.ring_attention(q, q, q, scale=0.25 if rank == 0 else np.float32(0.25)),
            # (a value the agreement does not see, in rank 1's own queries: it fails in its first step)
            "NaN in a ring": lambda: pd.ring_attention(nan_on_rank_1, q, q),
            "NaN in an all-gather": lambda: pd.allgather_attention(nan_on_rank_1, q, q),
            # (its text for the agreement raised OverflowError, which left the others waiting there)
            "one rank's huge scale": lambda: pd.ring_attention(q, q, q, scale=10**400 if rank == 1 else None),
            "two functions": lambda: (pd.allgather_attention if rank == 1 else pd.ring_attention)(q, q, q),
            # (two unsupported dtypes agreed as one code: gloo aborted a process on the sizes)
            "unsupported dtypes": lambda: pd.ring_attention(*((q.double(),) * 3 if rank == 0 else (q.int(),) * 3)),
        }
        for name, call in scenarios.items():
            try:
                call()
                errors[name] = "no error"
            except Exception as e:  # noqa: BLE001 (the test compares what each rank raised)
                errors[name] = f"{type(e).__name__}: {e}"
        with open(os.path.join(out_dir, f"misuse{rank}.json"), "w") as f:
            json.dump(errors, f)
    finally:
        leave_group()


def test_ranks_that_disagree_or_refuse_raise_on_every_rank(tmp_path):
    """A peer's K/V read as another dtype or shape gave wrong results (or a gloo abort), one rank's
    bad argument left the others waiting in a collective, and so did a rank that failed inside the
    ring (three ranks: the hang needs a peer that waits for the failed rank's next send): every rank
    now raises PasaError."""
    init_file = os.path.join(str(tmp_path), "rendezvous")
    torch.multiprocessing.spawn(misuse_worker, args=(3, init_file, str(tmp_path)), nprocs=3, join=True)
    errors = [json.load(open(os.path.join(str(tmp_path), f"misuse{r}.json"))) for r in range(3)]
    for r in range(3):
        assert errors[r]["dtype"].startswith("PasaError: group: the ranks' dtypes differ"), errors[r]
        assert errors[r]["policy"].startswith("PasaError: group: the ranks' function, policy and scale differ"), errors[r]
        assert errors[r]["head dim"].startswith("PasaError: group: the ranks' q's head dim differ"), errors[r]
        assert errors[r]["scale kinds"] == "no error", errors
    assert errors[1]["one rank's flag"].startswith("PasaError: causal: expected True or False"), errors[1]
    for r in (0, 2):
        assert errors[r]["one rank's flag"].startswith("PasaError: group: rank 1 refused its arguments"), errors[r]
    for r in range(3):
        for scenario in ("two functions", "one rank's huge scale"):
            assert errors[r][scenario].startswith("PasaError: group: the ranks' function, policy and scale "
                                                  "differ"), errors[r]
        assert errors[r]["unsupported dtypes"].startswith(("PasaError: q: unsupported dtype",
                                                           "PasaError: group: rank 0 refused")), errors[r]
    for scenario in ("NaN in a ring", "NaN in an all-gather"):
        assert errors[1][scenario].startswith("PasaError: q: non-finite value"), errors[1]
        for r in (0, 2):
            assert errors[r][scenario].startswith("PasaError: group: rank 1 failed while computing"), errors[r]


def test_zigzag_needs_two_tokens_a_rank():
    with pytest.raises(pasa.PasaError, match=r"^x: the zig-zag layout gives every rank two chunks"):
        pd.shard(torch.zeros(1, 1, 3, 1), 0, 2, zigzag=True)
    with pytest.raises(pasa.PasaError, match=r"^zigzag: expected True or False, got 'no'"):
        pd.shard(torch.zeros(1, 1, 8, 1), 0, 2, zigzag="no")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    print(f"seed {SEED}")
    return {world: run_world(world, tmp_path_factory) for world in (2, 3)}


@pytest.fixture(scope="module")
def single_device():
    """Single-device pasa.attention and the fp64 reference of every (policy, causal)."""
    q, k, v = make_inputs(SEED)
    out = {}
    for policy in pasa.Policy.presets():
        for causal in (False, True):
            out[(policy, causal)] = (
                pasa.attention(q, k, v, policy=policy, causal=causal, return_lse=True),
                pasa.reference(q, k, v, policy=policy, causal=causal, return_lse=True))
    return out


ALL_CASES = [(world, name, fn) for world in (2, 3) for name in cases()
             for fn in ("ring_attention", "allgather_attention")]


@pytest.mark.parametrize("world,name,fn", ALL_CASES)
def test_matches_single_device(results, single_device, world, name, fn):
    policy, causal, _ = parse_case(name)
    o, lse = results[world][(name, fn)]
    (o_single, lse_single), (o_ref, lse_ref) = single_device[(policy, causal)]
    v_max = float(np.abs(make_inputs(SEED)[2]).max())
    merge = 2 * unit_roundoff(pasa.Policy(policy).o) + 8 * U_FP32
    err_single = np.abs(o_single - o_ref).max()
    err = np.abs(o - o_ref).max()
    assert err <= 2 * err_single + merge * v_max, (err, err_single)
    lse_single_err = np.abs(lse_single - lse_ref).max()
    lse_err = np.abs(lse - lse_ref).max()
    assert lse_err <= 2 * lse_single_err + 8 * U_FP32 * np.abs(lse_ref).max(), (lse_err,
                                                                                  lse_single_err)


def test_exact_policy_matches_single_device_to_float32(results, single_device):
    """With the exact policy only float32 roundings separate the runs (relative ~1e-6)."""
    for world in (2, 3):
        for zigzag in ("contig", "zigzag"):
            for causal in (False, True):
                name = f"exact-{'causal' if causal else 'full'}-{zigzag}"
                o, _ = results[world][(name, "ring_attention")]
                o_single = single_device[("exact", causal)][0][0]
                np.testing.assert_allclose(o, o_single, rtol=0, atol=64 * U_FP32)


def test_merge_partial_is_attention_over_the_union():
    """Two halves of the keys, merged by LSE, equal attention over all of them (float32 merge)."""
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    q = rng.standard_normal((1, 2, 5, 16)) + 3.0
    k = rng.standard_normal((1, 2, 12, 16)) * 2.0
    v = rng.standard_normal((1, 2, 12, 16))
    o_all, lse_all = np_attention(q, k, v)
    o_a, lse_a = np_attention(q, k[:, :, :7], v[:, :, :7])
    o_b, lse_b = np_attention(q, k[:, :, 7:], v[:, :, 7:])
    o_acc = torch.zeros(1, 2, 5, 16)
    lse_acc = torch.full((1, 2, 5), float("-inf"))
    for o, lse in ((o_a, lse_a), (o_b, lse_b)):
        pd.merge_partial(o_acc, lse_acc, torch.from_numpy(o).float(), torch.from_numpy(lse).float())
    np.testing.assert_allclose(o_acc.numpy(), o_all, rtol=0, atol=16 * U_FP32 * np.abs(v).max())
    np.testing.assert_allclose(lse_acc.numpy(), lse_all, rtol=16 * U_FP32, atol=0)


def test_merge_partial_of_masked_rows():
    """A partial with LSE = -inf carries no weight; two of them leave O = 0, LSE = -inf."""
    o_acc = torch.zeros(1, 1, 2, 4)
    lse_acc = torch.full((1, 1, 2), float("-inf"))
    o = torch.tensor([[[[1.0, 2.0, 3.0, 4.0], [9.0, 9.0, 9.0, 9.0]]]])
    lse = torch.tensor([[[0.5, float("-inf")]]])
    pd.merge_partial(o_acc, lse_acc, o, lse)
    assert o_acc[0, 0, 0].tolist() == [1.0, 2.0, 3.0, 4.0] and lse_acc[0, 0, 0].item() == 0.5
    assert o_acc[0, 0, 1].tolist() == [0.0] * 4 and lse_acc[0, 0, 1].item() == float("-inf")


@pytest.mark.parametrize("big", [0.0, 1e8, -1e8, 3e38])
def test_merge_partial_weighs_equal_parts_half_at_any_lse(big):
    """Weights taken as exp(lse - lse_new) were 1 and 1 once float32 lost log(2) beside the LSE."""
    o_acc, lse_acc = torch.ones(1, 1, 1, 4), torch.full((1, 1, 1), big)
    pd.merge_partial(o_acc, lse_acc, torch.full((1, 1, 1, 4), 2.0), torch.full((1, 1, 1), big))
    assert o_acc.flatten().tolist() == [1.5] * 4
    assert lse_acc.item() == torch.tensor(big + np.log(2.0), dtype=torch.float32).item()


@pytest.mark.parametrize("o_shape, lse_shape, lse_value, acc_dtype, match", [
    ((1, 2, 1, 4), (1, 2, 1), 0.0, torch.float32, r"^o: shape \(1, 2, 1, 4\) differs from o_acc's"),
    ((1, 2, 5, 4), (1, 2, 1), 0.0, torch.float32, r"^lse: shape \(1, 2, 1\) differs from lse_acc's"),
    ((1, 2, 5, 4), (1, 2, 5), float("nan"), torch.float32, r"^lse: nan at \[0, 0, 0\] is not a log-sum-exp"),
    ((1, 2, 5, 4), (1, 2, 5), float("inf"), torch.float32, r"^lse: inf at \[0, 0, 0\] is not a log-sum-exp"),
    ((1, 2, 5, 4), (1, 2, 5), 0.0, torch.float16, r"^o_acc: dtype torch.float16; the accumulators are float32"),
])
def test_merge_partial_refuses_what_it_cannot_merge(o_shape, lse_shape, lse_value, acc_dtype, match):
    """Partials of another shape were broadcast into every row, and a NaN or +inf LSE made the
    accumulators NaN; now refused, the accumulators unchanged."""
    o_acc, lse_acc = torch.ones(1, 2, 5, 4, dtype=acc_dtype), torch.zeros(1, 2, 5, dtype=acc_dtype)
    before = (o_acc.clone(), lse_acc.clone())
    with pytest.raises(pasa.PasaError, match=match):
        pd.merge_partial(o_acc, lse_acc, torch.ones(o_shape), torch.full(lse_shape, lse_value))
    assert torch.equal(o_acc, before[0]) and torch.equal(lse_acc, before[1])
    with pytest.raises(pasa.PasaError, match=r"^lse_acc: shape \(1, 2, 5, 1\); expected o_acc's"):
        pd.merge_partial(torch.ones(1, 2, 5, 4), torch.zeros(1, 2, 5, 1), torch.ones(1, 2, 5, 4),
                         torch.zeros(1, 2, 5, 1))


def test_merge_partial_refuses_before_writing_what_torch_would_refuse_after():
    """Accumulators that require grad, or inference tensors outside inference mode: torch refused the
    second in-place write after the first (or after both); a float64 LSE past float32's range became
    +inf in the merge and the accumulators NaN."""
    o = torch.ones(1, 1, 1, 2)
    for o_acc, lse_acc, match in (
            (torch.ones(1, 1, 1, 2), torch.zeros(1, 1, 1, requires_grad=True), r"^lse_acc: requires grad"),
            (torch.ones(1, 1, 1, 2), torch.zeros(1, 1, 1), r"^lse_acc: an inference tensor")):
        if match.endswith("inference tensor"):
            with torch.inference_mode():
                lse_acc = torch.zeros(1, 1, 1)
        before = o_acc.clone()
        with pytest.raises(pasa.PasaError, match=match):
            pd.merge_partial(o_acc, lse_acc, o, torch.zeros(1, 1, 1))
        assert torch.equal(o_acc, before)
    o_acc, lse_acc = torch.ones(1, 1, 1, 2), torch.zeros(1, 1, 1)
    with pytest.raises(pasa.PasaError, match=r"^lse: 1e\+39 at \[0, 0, 0\] is not a log-sum-exp float32 can hold"):
        pd.merge_partial(o_acc, lse_acc, o, torch.full((1, 1, 1), 1e39, dtype=torch.float64))
    assert torch.equal(o_acc, o) and lse_acc.item() == 0.0


def test_unsupported_dtypes_are_refused_before_any_communication():
    # Stacked for the exchange, int32 V beside fp16 K was promoted to fp16 and run (4097 became 4096).
    x = torch.zeros(1, 1, 4, 8, dtype=torch.float16)
    for fn in (pd.ring_attention, pd.allgather_attention):
        with pytest.raises(pasa.PasaError, match=r"^v: unsupported dtype int32"):
            fn(x, x, x.int())


def test_merge_partial_of_parts_that_share_the_accumulators_memory():
    """A part that is the accumulator itself, or overlaps it, merges as its copy would (the
    accumulator was rescaled before the part was read); accumulators that overlap themselves or each
    other are refused unchanged (a broadcast lse_acc failed in torch with o_acc already rescaled)."""
    o_acc, lse_acc = torch.tensor([[[[1.0, 2.0]]]]), torch.tensor([[[0.5]]])
    pd.merge_partial(o_acc, lse_acc, o_acc, lse_acc)
    assert o_acc.flatten().tolist() == [1.0, 2.0]
    assert lse_acc.item() == torch.tensor(0.5 + np.log(2.0), dtype=torch.float32).item()
    buf = torch.arange(8, dtype=torch.float32)
    o_acc, o = buf[0:4].view(1, 1, 2, 2), buf[2:6].view(1, 1, 2, 2)
    want = torch.ones(1, 1, 2, 2) * o_acc
    pd.merge_partial(want, torch.zeros(1, 1, 2), o.clone(), torch.zeros(1, 1, 2))
    pd.merge_partial(o_acc, torch.zeros(1, 1, 2), o, torch.zeros(1, 1, 2))
    assert torch.equal(o_acc, want)
    o_acc = torch.ones(1, 1, 2, 2)
    buffer = np.zeros(6, np.float32)  # (two tensors from one NumPy buffer have two storages)
    for o_acc, lse_acc, match in (
            (o_acc, torch.zeros(1).expand(1, 1, 2), r"^lse_acc: its elements share memory"),
            (o_acc, o_acc[..., 0], r"^o_acc and lse_acc share memory"),
            (torch.from_numpy(buffer[:4]).view(1, 1, 2, 2), torch.from_numpy(buffer[3:5]).view(1, 1, 2),
             r"^o_acc and lse_acc share memory")):
        before = o_acc.clone()
        with pytest.raises(pasa.PasaError, match=match):
            pd.merge_partial(o_acc, lse_acc, torch.ones(1, 1, 2, 2), torch.zeros(1, 1, 2))
        assert torch.equal(o_acc, before)
    # A strided view whose elements are all apart is an accumulator like any other.
    pd.merge_partial(torch.zeros(20).as_strided((1, 1, 2, 3), (1, 1, 10, 2)), torch.full((1, 1, 2), -np.inf),
                     torch.ones(1, 1, 2, 3), torch.zeros(1, 1, 2))
    with pytest.raises(pasa.PasaError, match=r"^o_acc: its elements share memory"):
        pd.merge_partial(torch.zeros(20).as_strided((1, 1, 2, 3), (1, 1, 2, 1)), torch.full((1, 1, 2), -np.inf),
                         torch.ones(1, 1, 2, 3), torch.zeros(1, 1, 2))


def test_merge_partial_ignores_what_a_weightless_partial_holds():
    """An O with inf or NaN where its LSE is -inf (an accumulator from torch.empty) weighs nothing."""
    o_acc = torch.tensor([[[[float("nan")] * 4, [1.0, 2.0, 3.0, 4.0]]]])
    lse_acc = torch.tensor([[[float("-inf"), 0.0]]])
    o = torch.tensor([[[[2.0] * 4, [float("inf"), float("nan"), 0.0, 0.0]]]])
    lse = torch.tensor([[[1.0, float("-inf")]]])
    pd.merge_partial(o_acc, lse_acc, o, lse)
    assert o_acc[0, 0, 0].tolist() == [2.0] * 4 and lse_acc[0, 0, 0].item() == 1.0
    assert o_acc[0, 0, 1].tolist() == [1.0, 2.0, 3.0, 4.0] and lse_acc[0, 0, 1].item() == 0.0


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("zigzag", [False, True])
def test_shard_unshard_round_trip(world, zigzag):
    x = torch.arange(2 * 3 * 23 * 2, dtype=torch.float32).reshape(2, 3, 23, 2)
    shards = [pd.shard(x, r, world, zigzag=zigzag) for r in range(world)]
    assert sum(s.shape[2] for s in shards) == 23
    assert torch.equal(pd.unshard(shards, zigzag=zigzag), x)
    lse = x[..., 0]
    assert torch.equal(pd.unshard([pd.shard(x, r, world, zigzag=zigzag)[..., 0]
                                   for r in range(world)], zigzag=zigzag), lse)


def test_zigzag_shards_hold_balanced_chunks():
    x = torch.arange(8.0).reshape(1, 1, 8, 1)
    assert pd.shard(x, 0, 2, zigzag=True).flatten().tolist() == [0, 1, 6, 7]
    assert pd.shard(x, 1, 2, zigzag=True).flatten().tolist() == [2, 3, 4, 5]


@pytest.mark.parametrize("rank, world, match", [(-1, 2, r"^rank: -1 is outside 0\.\.1"),
                                                (2, 2, r"^rank: 2 is outside 0\.\.1"),
                                                (0, 0, r"^world_size: 0 is below 1"),
                                                (0.0, 2, r"^rank: expected an int")])
def test_shard_refuses_ranks_outside_the_world(rank, world, match):
    x = torch.arange(10.0).view(1, 1, 10, 1)
    with pytest.raises(pasa.PasaError, match=match):
        pd.shard(x, rank, world)
    with pytest.raises(pasa.PasaError, match=r"^x: expected a 4-D torch.Tensor"):
        pd.shard(x[0], 0, 2)
    with pytest.raises(pasa.PasaError, match=r"^shards: expected a non-empty sequence"):
        pd.unshard([])
    with pytest.raises(pasa.PasaError, match=r"^x: 2 tokens leave a rank of the 3 without one"):
        pd.shard(x[:, :, :2], 0, 3)


def test_lengths_that_are_not_zigzag_raise():
    with pytest.raises(pasa.PasaError, match="zig-zag"):
        pd.unshard([torch.zeros(1, 1, 3, 1), torch.zeros(1, 1, 5, 1)], zigzag=True)


def test_needs_an_initialized_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    x = torch.zeros(1, 1, 4, 8)
    with pytest.raises(pasa.PasaError, match="init_process_group"):
        pd.ring_attention(x, x, x)


def test_inputs_that_require_grad_are_refused():
    # The merged output records no autograd, so a backward through it would silently have no
    # gradient: refused before any communication (no process group needed to see it).
    x = torch.zeros(1, 1, 4, 8, requires_grad=True)
    for fn in (pd.ring_attention, pd.allgather_attention):
        with pytest.raises(pasa.PasaError, match=r"^q: requires grad; context-parallel attention is inference only"):
            fn(x, x.detach(), x.detach())
