# SPDX-License-Identifier: Apache-2.0
"""Context parallelism: attention over a sequence sharded across the ranks of a torch.distributed
process group, with every policy's partial results merged exactly through their LSE.

Each rank holds a slice of the sequence, the same tokens for Q, K and V, ``[B, H, S_rank, D]``
(``layout="bhsd"`` only). Two shard layouts:

- ``zigzag=False`` (contiguous): rank r holds the r-th consecutive slice; the slices may have any
  lengths (at least 1 each), in rank order.
- ``zigzag=True`` (load-balanced for causal attention): the sequence is cut into 2N chunks by
  :func:`numpy.array_split`'s rule (the first ``S mod 2N`` chunks one token longer) and rank r holds
  chunks r and 2N-1-r, concatenated. Every rank then has the same causal work. :func:`shard` and
  :func:`unshard` convert between the full sequence and either layout.

Causal attention is over the global sequence (query i sees keys j <= i); each (query chunk, key
chunk) pair is then either fully visible, the diagonal (the same chunk: causal within it, where
pasa's bottom-right and top-left alignments agree) or fully masked and skipped.

:func:`ring_attention` passes K/V around the ring with point-to-point sends (NCCL on GPUs, gloo on
CPUs); the transfer of the next block is posted before the local attention on the current block, so
they overlap (NCCL runs its transfers on its own stream; ``wait`` only orders torch's current
stream after them). :func:`allgather_attention` gathers all of K/V first: less latency for short
rings, memory for the whole K/V on every rank.

Partial outputs are merged in float32 by their LSE. Every policy's LSE is the log of its full
normalizer, shift included (PASA's running reference, the unified max of ``fdpp``), so the merge is the
same for every policy and adds only float32 roundings. Importing this module imports torch.
"""

from __future__ import annotations

import numbers
import zlib
from typing import List, Optional, Sequence, Tuple, Union

try:
    import torch
    import torch.distributed as dist
    from torch import Tensor
except ImportError as error:  # (as pasa.capture and pasa.patch say it)
    raise ImportError("pasa.distributed needs torch (pip install torch)") from error

from ._api import attention as _attention
from ._arrays import addresses_an_element_twice, check_writable
from ._arrays import check_not_meta as _check_not_meta
from ._errors import PasaError
from ._errors import flag_argument as _flag_argument
from ._policy import PolicyLike
from ._policy import core_policy as _core_policy

__all__ = ["ring_attention", "allgather_attention", "shard", "unshard", "merge_partial"]

# A chunk of the global sequence as a rank stores it: (global start, local start, length).
_Chunk = Tuple[int, int, int]


def _split_lengths(total: int, parts: int) -> List[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _chunk_bounds(total: int, parts: int) -> List[Tuple[int, int]]:
    bounds, start = [], 0
    for length in _split_lengths(total, parts):
        bounds.append((start, start + length))
        start += length
    return bounds


def _check_zigzag_tokens(total: int, world: int, name: str) -> None:
    if total < 2 * world:
        raise PasaError(f"{name}: the zig-zag layout gives every rank two chunks of the sequence, so it needs "
                        f"at least 2 * world_size = {2 * world} tokens, got {total}; use the contiguous layout "
                        f"(zigzag=False)")


def _rank_chunks(lengths: Sequence[int], zigzag: bool) -> List[List[_Chunk]]:
    """Each rank's chunks from every rank's local length; raises if they fit no layout."""
    world, total = len(lengths), sum(lengths)
    if min(lengths) < 1:
        raise PasaError(f"q: every rank needs at least one token, got local lengths "
                        f"{list(lengths)}")
    if not zigzag:
        starts = [sum(lengths[:r]) for r in range(world)]
        return [[(starts[r], 0, lengths[r])] for r in range(world)]
    _check_zigzag_tokens(total, world, "q")
    bounds = _chunk_bounds(total, 2 * world)
    chunks = []
    for r in range(world):
        (a0, a1), (b0, b1) = bounds[r], bounds[2 * world - 1 - r]
        if a1 - a0 + b1 - b0 != lengths[r] or a1 == a0 or b1 == b0:
            raise PasaError(
                f"q: local lengths {list(lengths)} are not the zig-zag layout of {total} tokens "
                f"over {world} ranks (chunk lengths {_split_lengths(total, 2 * world)}); build the "
                f"shards with pasa.distributed.shard(x, rank, world_size, zigzag=True)")
        chunks.append([(a0, 0, a1 - a0), (b0, a1 - a0, b1 - b0)])
    return chunks


def shard(x: Tensor, rank: int, world_size: int, *, zigzag: bool = False) -> Tensor:
    """Rank ``rank``'s slice of the full sequence ``x`` ``[B, H, S, D]`` (a view when contiguous).

    Contiguous: :func:`numpy.array_split`'s rule over ``world_size`` slices. Zig-zag: chunks
    ``rank`` and ``2 * world_size - 1 - rank`` of ``2 * world_size``, concatenated.
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise PasaError("x: expected a 4-D torch.Tensor [B, H, S, D] (the full sequence on dim 2)")
    for name, value in (("world_size", world_size), ("rank", rank)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise PasaError(f"{name}: expected an int, got {value!r}")
    if world_size < 1:
        raise PasaError(f"world_size: {world_size} is below 1")
    if not 0 <= rank < world_size:
        raise PasaError(f"rank: {rank} is outside 0..{world_size - 1}")
    _flag_argument(zigzag, "zigzag")
    if zigzag:
        _check_zigzag_tokens(x.shape[2], world_size, "x")
    elif x.shape[2] < world_size:  # (an empty shard is refused by every other call of the module)
        raise PasaError(f"x: {x.shape[2]} tokens leave a rank of the {world_size} without one; every rank "
                        f"needs at least one")
    if not zigzag:
        start, stop = _chunk_bounds(x.shape[2], world_size)[rank]
        return x[:, :, start:stop]
    bounds = _chunk_bounds(x.shape[2], 2 * world_size)
    (a0, a1), (b0, b1) = bounds[rank], bounds[2 * world_size - 1 - rank]
    return torch.cat([x[:, :, a0:a1], x[:, :, b0:b1]], dim=2)


def unshard(shards: Sequence[Tensor], *, zigzag: bool = False) -> Tensor:
    """The full sequence from every rank's slice (rank order), the inverse of :func:`shard`.

    Works on any per-rank tensors whose dim 2 is the sequence (outputs ``[B, H, S, D]``) or whose
    last dim is (LSEs ``[B, H, S]``).
    """
    _flag_argument(zigzag, "zigzag")
    if len(shards) == 0 or not all(isinstance(s, torch.Tensor) for s in shards):
        raise PasaError("shards: expected a non-empty sequence of torch.Tensor, one per rank in rank order")
    dim = 2 if shards[0].dim() == 4 else shards[0].dim() - 1
    chunks = _rank_chunks([s.shape[dim] for s in shards], zigzag)
    pieces = [(g, s.narrow(dim, local, n)) for s, rank in zip(shards, chunks)
              for g, local, n in rank]
    return torch.cat([p for _, p in sorted(pieces, key=lambda gp: gp[0])], dim=dim)


def merge_partial(o_acc: Tensor, lse_acc: Tensor, o: Tensor, lse: Tensor) -> None:
    """Merges a partial result ``(o, lse)`` into the float32 ``(o_acc, lse_acc)``, in place.

    Both are attention over disjoint key sets for the same queries; the merge is their
    normalizer-weighted average, weights ``exp(lse_i - lse_new)`` (taken against the larger of the two,
    so that they stay exact at any LSE). Rows with ``lse = -inf`` (no visible key
    yet), and parts whose weight underflows to 0, carry none, whatever their O holds (an accumulator
    from ``torch.empty``); a row where both are -inf stays ``O = 0, LSE = -inf``.

    ``o`` has ``o_acc``'s shape and ``lse`` ``lse_acc``'s, which is ``o_acc``'s without its last
    dimension, on one device; an LSE of NaN or +inf is not a log-sum-exp. ``o`` and ``lse`` may share
    memory with the accumulators (merging a part with itself adds log 2 to its LSE); the accumulators
    may not share it with each other or within themselves (a broadcast view). Anything else raises
    PasaError before ``o_acc`` or ``lse_acc`` changes (reading the LSEs' values waits for their device).
    """
    _check_partials(o_acc, lse_acc, o, lse)
    _merge(o_acc, lse_acc, o, lse)


def _check_partials(o_acc: Tensor, lse_acc: Tensor, o: Tensor, lse: Tensor) -> None:
    named = (("o_acc", o_acc), ("lse_acc", lse_acc), ("o", o), ("lse", lse))
    for name, x in named:
        if not isinstance(x, torch.Tensor):
            raise PasaError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
        _check_not_meta(x, name)
        if not x.is_floating_point():
            raise PasaError(f"{name}: dtype {x.dtype} is not a floating-point type")
        if x.device != o_acc.device:
            raise PasaError(f"{name}: on {x.device}, o_acc on {o_acc.device}; the four must be on one device")
    for name, x in (("o_acc", o_acc), ("lse_acc", lse_acc)):
        if x.dtype != torch.float32:
            raise PasaError(f"{name}: dtype {x.dtype}; the accumulators are float32 (an LSE past 65504 "
                            f"or O's weighted sums need its range and precision)")
        # (what torch would refuse of the in-place writes, refused before the first of them)
        if x.requires_grad and torch.is_grad_enabled():
            raise PasaError(f"{name}: requires grad; the merge writes it in place: call it under torch.no_grad()")
        check_writable(x, name)
    if o_acc.dim() < 1 or tuple(lse_acc.shape) != tuple(o_acc.shape[:-1]):
        raise PasaError(f"lse_acc: shape {tuple(lse_acc.shape)}; expected o_acc's {tuple(o_acc.shape)} "
                        f"without its last dimension")
    if o.shape != o_acc.shape:
        raise PasaError(f"o: shape {tuple(o.shape)} differs from o_acc's {tuple(o_acc.shape)}")
    if lse.shape != lse_acc.shape:
        raise PasaError(f"lse: shape {tuple(lse.shape)} differs from lse_acc's {tuple(lse_acc.shape)}")
    for name, x in (("o_acc", o_acc), ("lse_acc", lse_acc)):
        if addresses_an_element_twice(tuple(x.shape), x.stride()):
            raise PasaError(f"{name}: its elements share memory (a broadcast or overlapping view, strides "
                            f"{tuple(x.stride())}); the merge writes every element")
    if _byte_ranges_meet(o_acc, lse_acc):
        raise PasaError("o_acc and lse_acc share memory; the merge writes both")
    for name, x in (("lse_acc", lse_acc), ("lse", lse)):
        # (a float64 LSE past float32's largest value would become +inf in the float32 merge)
        bad = torch.isnan(x) | torch.isposinf(x) | (x > torch.finfo(torch.float32).max)
        if bool(bad.any()):
            where = [int(i) for i in torch.nonzero(bad)[0]]
            raise PasaError(f"{name}: {float(x[tuple(where)])} at {where} is not a log-sum-exp float32 can hold")


def _byte_ranges_meet(a: Tensor, b: Tensor) -> bool:
    """Whether the byte ranges a and b span meet (their data pointers are addresses on one device,
    whatever storages hold them: two tensors from one NumPy buffer have two)."""
    if a.numel() == 0 or b.numel() == 0:
        return False

    def span(t: Tensor) -> Tuple[int, int]:
        low = sum(st * (n - 1) for st, n in zip(t.stride(), t.shape) if st < 0)
        high = sum(st * (n - 1) for st, n in zip(t.stride(), t.shape) if st > 0)
        return t.data_ptr() + low * t.element_size(), t.data_ptr() + (high + 1) * t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


def _merge(o_acc: Tensor, lse_acc: Tensor, o: Tensor, lse: Tensor) -> None:
    """merge_partial without its checks: the ring's own partials, which pasa.attention made."""
    lse = lse.to(torch.float32)
    # The weights come from the terms shifted by the larger LSE, not from exp(lse - lse_new): in float32
    # log(2) added to an LSE past about 1e7 is lost to rounding, which made two equal parts weigh 1 each.
    hi = torch.maximum(lse_acc, lse)
    empty = torch.isneginf(hi)
    safe = torch.where(empty, torch.zeros_like(hi), hi)
    e_acc, e_new = torch.exp(lse_acc - safe), torch.exp(lse - safe)
    total = torch.where(empty, torch.ones_like(hi), e_acc + e_new)  # (>= 1 elsewhere: the larger term is 1)
    lse_new = torch.where(empty, hi, safe + torch.log(total))
    w_acc = (e_acc / total).unsqueeze(-1)
    w_new = (e_new / total).unsqueeze(-1)
    # A part of weight 0 adds nothing whatever its O holds (0 times an inf or NaN there would be NaN),
    # as merge_partials weighs parts in C++.
    # Formed apart, then written: o and lse may be o_acc and lse_acc themselves, or overlap them.
    o_new = (w_acc * o_acc).masked_fill_(w_acc == 0, 0.0)
    o_new.add_((w_new * o.to(torch.float32)).masked_fill_(w_new == 0, 0.0))
    o_acc.copy_(o_new)
    lse_acc.copy_(lse_new)


def _group_info(group) -> Tuple[int, int]:
    if not dist.is_available() or not dist.is_initialized():
        raise PasaError("group: torch.distributed is not initialized; call "
                        "torch.distributed.init_process_group first (e.g. under torchrun)")
    rank = dist.get_rank(group)
    if rank < 0:
        raise PasaError("group: this process is not a member of the group; call it on the group's ranks only")
    return rank, dist.get_world_size(group)


def _check_inputs(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise PasaError(f"{name}: expected a 4-D torch.Tensor [B, H, S, D] (layout 'bhsd')")
        _check_not_meta(x, name)
        if x.dtype not in _DTYPES:  # (stacked, K and V would be promoted to one type and run)
            raise PasaError(f"{name}: unsupported dtype {str(x.dtype).replace('torch.', '')} (pasa takes "
                            f"float32, float16 or bfloat16)")
        if x.requires_grad and torch.is_grad_enabled():  # (the merged output records no autograd)
            raise PasaError(f"{name}: requires grad; context-parallel attention is inference only "
                            f"(no backward): call it under torch.no_grad() or torch.inference_mode()")
    if k.shape != v.shape:
        raise PasaError(f"v: shape {tuple(v.shape)} differs from k's {tuple(k.shape)}")
    if q.shape[2] != k.shape[2]:
        raise PasaError(f"k: a rank holds the same tokens of q, k and v; got {q.shape[2]} query "
                        f"and {k.shape[2]} key positions")


def _global_rank(group, group_rank: int) -> int:
    """The global rank of ``group_rank`` (modulo the group's size), what P2POp takes as peer."""
    group_rank %= dist.get_world_size(group)
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def _scale_text(scale) -> str:
    """The scale as the ranks compare it: the same number whether given as a Python or NumPy float."""
    try:
        return repr(None if scale is None else float(scale))
    except (TypeError, ValueError, OverflowError, RuntimeError):  # (pasa.attention names what it is; the
        return repr(scale)                                           # ranks compare its text)


_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# What every rank must give alike, after its local length (entry 0) and whether its own checks passed.
_AGREED = ("q's batch", "K/V's batch", "query heads", "K/V heads", "q's head dim", "K/V's head dim", "dtypes",
           "zigzag", "causal", "return_lse", "function, policy and scale")


def _agree(function: str, q, k, v, group, policy: PolicyLike, causal, zigzag, scale,
           return_lse) -> Tuple[int, int, List[int]]:
    """(rank, world size, every rank's local length), once every rank has checked its own arguments
    and all agree on the problem's shape and options (one all_gather): a rank whose checks failed
    raises its error, and every other rank a PasaError naming it, instead of waiting for it in a later
    collective or reading a peer's K/V as another shape or dtype. ``function`` (the caller's name)
    is agreed on too: ranks in two different functions would wait in different collectives. (Without
    a process group, bad arguments are named first.)"""
    error = None
    try:
        _check_inputs(q, k, v)
        for name, flag in (("causal", causal), ("zigzag", zigzag), ("return_lse", return_lse)):
            _flag_argument(flag, name)
        options = zlib.crc32(f"{function}|{_core_policy(policy).to_string()}|{_scale_text(scale)}".encode())
    except Exception as e:  # (whatever a rank's own checks raise, the others learn of it, not wait)
        error = e
    try:
        rank, world = _group_info(group)
    except PasaError:
        if error is not None:
            raise error from None
        raise
    # (NCCL gathers CUDA tensors only; gloo takes CPU ones)
    device = q.device if isinstance(q, torch.Tensor) and q.device.type == "cuda" else torch.device("cpu")
    if error is None:
        code = [_DTYPES.index(x.dtype) if x.dtype in _DTYPES else len(_DTYPES) for x in (q, k, v)]
        mine = [q.shape[2], 1, q.shape[0], k.shape[0], q.shape[1], k.shape[1], q.shape[3], k.shape[3],
                16 * code[0] + 4 * code[1] + code[2], int(zigzag), int(causal), int(return_lse), options]
    else:
        mine = [0] * (2 + len(_AGREED))
    mine_t = torch.tensor(mine, dtype=torch.int64, device=device)
    every = [torch.empty_like(mine_t) for _ in range(world)]
    dist.all_gather(every, mine_t, group=group)
    rows = [t.tolist() for t in every]
    if error is not None:
        raise error
    refused = [r for r, row in enumerate(rows) if row[1] == 0]
    if refused:
        raise PasaError(f"group: rank {refused[0]} refused its arguments (its own error says why); no rank "
                        f"computes")
    for i, what in enumerate(_AGREED):
        values = [row[2 + i] for row in rows]
        if len(set(values)) > 1:
            r = next(r for r, x in enumerate(values) if x != values[0])
            raise PasaError(f"group: the ranks' {what} differ (rank 0's and rank {r}'s); every rank must give the "
                            f"same problem, only its slice of the sequence differs")
    return rank, world, [row[0] for row in rows]


def _partial(q: Tensor, k: Tensor, v: Tensor, diagonal: bool, policy: PolicyLike,
             scale: Optional[float]) -> Tuple[Tensor, Tensor]:
    """pasa.attention on one (query chunk, key chunk) pair, output kept in float32."""
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    return _attention(q, k, v, policy=policy, causal=diagonal, scale=scale, return_lse=True,
                     out=out)


def _attend_block(q: Tensor, q_chunks: List[_Chunk], kv: Tensor, kv_chunks: List[_Chunk],
                  accumulators: List[Tuple[Tensor, Tensor]], causal: bool, policy: PolicyLike,
                  scale: Optional[float]) -> None:
    """Adds the attention of every local query chunk to one rank's K/V (``kv`` = stack of k, v)."""
    for (q_start, q_local, q_len), (o_acc, lse_acc) in zip(q_chunks, accumulators):
        q_part = q[:, :, q_local:q_local + q_len]
        for kv_start, kv_local, kv_len in kv_chunks:
            diagonal = causal and kv_start == q_start
            if causal and not diagonal and kv_start > q_start:
                continue  # every key of this chunk follows every query of q's chunk
            k_part = kv[0, :, :, kv_local:kv_local + kv_len]
            v_part = kv[1, :, :, kv_local:kv_local + kv_len]
            o, lse = _partial(q_part, k_part, v_part, diagonal, policy, scale)
            _merge(o_acc, lse_acc, o, lse)


def _finish(q: Tensor, accumulators: List[Tuple[Tensor, Tensor]],
            return_lse: bool) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    o = torch.cat([acc[0] for acc in accumulators], dim=2).to(q.dtype)
    lse = torch.cat([acc[1] for acc in accumulators], dim=2)
    return (o, lse) if return_lse else o


def _accumulators(q: Tensor, q_chunks: List[_Chunk]) -> List[Tuple[Tensor, Tensor]]:
    b, h, _, d = q.shape
    return [(torch.zeros((b, h, n, d), dtype=torch.float32, device=q.device),
             torch.full((b, h, n), float("-inf"), dtype=torch.float32, device=q.device))
            for _, _, n in q_chunks]


def ring_attention(q: Tensor, k: Tensor, v: Tensor, *, group=None, policy: PolicyLike = "exact",
                   causal: bool = False, zigzag: bool = False, scale: Optional[float] = None,
                   return_lse: bool = False) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Attention of this rank's queries over the K/V of every rank, K/V passed around the ring.

    Args:
        q: this rank's queries ``[B, H_q, S_rank, D]``; float32, float16 or bfloat16; CPU tensors
            run the emulator (use gloo), CUDA tensors the kernels (use NCCL).
        k, v: this rank's keys and values ``[B, H_kv, S_rank, D]`` (the same tokens as ``q``);
            ``H_kv`` divides ``H_q`` (GQA).
        group: the process group (the default group when None); ranks in group-rank order hold
            the sequence's slices.
        policy, scale: as in :func:`pasa.attention`.
        causal: global causal mask over the whole sequence (query i sees keys j <= i).
        zigzag: the shards are in the zig-zag layout (see the module's docstring); balances the
            causal work across ranks.
        return_lse: also return the float32 LSE ``[B, H_q, S_rank]`` over the whole sequence.

    Returns:
        This rank's output in ``q``'s dtype (and the LSE), equal to single-device attention on the
        whole sequence within the policy's tolerance.
    """
    rank, world, lengths = _agree("ring_attention", q, k, v, group, policy, causal, zigzag, scale, return_lse)
    chunks = _rank_chunks(lengths, zigzag)
    accumulators = _accumulators(q, chunks[rank])
    current = torch.stack([k, v]).contiguous()
    send_to, recv_from = _global_rank(group, rank + 1), _global_rank(group, rank - 1)
    error: Optional[BaseException] = None
    for step in range(world):
        source = (rank - step) % world
        requests, incoming = [], None
        if step + 1 < world:
            # Post the next block's transfer before computing on this one, so they overlap.
            sender = (source - 1) % world
            incoming = current.new_empty(current.shape[:3] + (sum(c[2] for c in chunks[sender]),)
                                         + current.shape[4:])
            requests = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, current, send_to, group),
                dist.P2POp(dist.irecv, incoming, recv_from, group)])
        if error is None:
            try:
                _attend_block(q, chunks[rank], current, chunks[source], accumulators, causal, policy,
                              scale)
            except Exception as e:  # (a value the agreement does not see: a NaN, an overflow, memory)
                error = e  # the ring's transfers go on, or the peers would wait for them
        for request in requests:
            request.wait()
        if incoming is not None:
            current = incoming
    _agree_on_failure(error, rank, group, q.device)
    return _finish(q, accumulators, return_lse)


def _agree_on_failure(error: Optional[BaseException], rank: int, group, device: torch.device) -> None:
    """Raises on every rank where one rank's computation failed (one all_reduce): that rank its own
    error, the others a PasaError naming it, so that no rank returns a result the others do not."""
    failed = torch.tensor([rank + 1 if error is not None else 0], dtype=torch.int64,
                          device=device if device.type == "cuda" else torch.device("cpu"))
    dist.all_reduce(failed, op=dist.ReduceOp.MAX, group=group)
    if error is not None:
        raise error
    if failed.item() > 0:
        raise PasaError(f"group: rank {failed.item() - 1} failed while computing (its own error says why); "
                        f"no rank returns a result")


def allgather_attention(q: Tensor, k: Tensor, v: Tensor, *, group=None,
                        policy: PolicyLike = "exact", causal: bool = False, zigzag: bool = False,
                        scale: Optional[float] = None,
                        return_lse: bool = False) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Same arguments and result as :func:`ring_attention`, all K/V gathered on every rank first.

    One collective instead of N - 1 ring steps (better for short rings), and no merge: each local
    query chunk attends once to the keys it sees (causal: the prefix that ends with its own chunk,
    bottom-right aligned). Needs memory for the whole sequence's K/V on every rank.
    """
    rank, world, lengths = _agree("allgather_attention", q, k, v, group, policy, causal, zigzag, scale, return_lse)
    chunks = _rank_chunks(lengths, zigzag)
    local = torch.stack([k, v])
    # all_gather needs equal sizes: pad every rank's K/V to the longest shard.
    padded = local.new_zeros(local.shape[:3] + (max(lengths),) + local.shape[4:])
    padded[:, :, :, :local.shape[3]] = local
    gathered = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded, group=group)
    pieces = sorted(((g, t[:, :, :, loc:loc + n]) for t, rank_chunks in zip(gathered, chunks)
                     for g, loc, n in rank_chunks), key=lambda gp: gp[0])
    kv = torch.cat([p for _, p in pieces], dim=3)
    outputs, lses = [], []
    error: Optional[BaseException] = None
    try:
        for q_start, q_local, q_len in chunks[rank]:
            stop = q_start + q_len if causal else kv.shape[3]
            out = torch.empty(q[:, :, q_local:q_local + q_len].shape, dtype=q.dtype, device=q.device)
            o, lse = _attention(q[:, :, q_local:q_local + q_len], kv[0, :, :, :stop],
                               kv[1, :, :, :stop], policy=policy, causal=causal, scale=scale,
                               return_lse=True, out=out)
            outputs.append(o)
            lses.append(lse)
    except Exception as e:
        error = e
    _agree_on_failure(error, rank, group, q.device)
    o, lse = torch.cat(outputs, dim=2), torch.cat(lses, dim=2)
    return (o, lse) if return_lse else o
