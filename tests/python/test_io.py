# SPDX-License-Identifier: Apache-2.0
"""pasa.load / pasa.save: .npy and .safetensors round trips and hostile files."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

import pasa


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4, 8), (1, 1, 1, 1, 3)])
def test_npy_round_trip(tmp_path, rng, dtype, shape):
    x = rng.standard_normal(shape).astype(dtype)
    path = tmp_path / "x.npy"
    pasa.save(path, x)
    y = pasa.load(path)
    assert y.dtype == dtype and y.shape == shape
    np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(np.load(path), x)  # NumPy reads what pasa writes


def test_npy_reads_numpy_files(tmp_path, rng):
    x = rng.standard_normal((4, 6)).astype(np.float16)
    np.save(tmp_path / "n.npy", x)
    np.testing.assert_array_equal(pasa.load(str(tmp_path / "n.npy")), x)


def test_non_contiguous_arrays_are_saved_in_c_order(tmp_path, rng):
    x = rng.standard_normal((4, 6, 8)).astype(np.float32)
    view = x.transpose(2, 0, 1)[::2]
    pasa.save(tmp_path / "v.npy", view)
    np.testing.assert_array_equal(pasa.load(tmp_path / "v.npy"), view)


def test_safetensors_round_trip(tmp_path, rng):
    tensors = {
        "q": rng.standard_normal((1, 2, 5, 8)).astype(np.float32),
        "k": rng.standard_normal((1, 2, 7, 8)).astype(np.float16),
        "v": rng.standard_normal((1, 2, 7, 8)).astype(np.float16),
    }
    path = tmp_path / "qkv.safetensors"
    pasa.save(path, tensors)
    loaded = pasa.load(path)
    assert sorted(loaded) == ["k", "q", "v"]
    for name, x in tensors.items():
        assert loaded[name].dtype == x.dtype
        np.testing.assert_array_equal(loaded[name], x)


def write_bf16_safetensors(path, name, values, shape):
    """A .safetensors file written by hand: bf16 = the top 16 bits of each float32."""
    bits = (np.asarray(values, np.float32).view(np.uint32) >> 16).astype("<u2")
    data = bits.tobytes()
    header = json.dumps({name: {"dtype": "BF16", "shape": list(shape),
                                "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def test_bf16_loads_as_float32(tmp_path, rng):
    values = rng.standard_normal(24).astype(np.float32)
    exact_bf16 = (values.view(np.uint32) & 0xFFFF0000).view(np.float32)  # representable values
    path = tmp_path / "b.safetensors"
    write_bf16_safetensors(path, "x", exact_bf16, (2, 3, 4))
    x = pasa.load(path)["x"]
    assert x.dtype == np.float32 and x.shape == (2, 3, 4)
    np.testing.assert_array_equal(x.ravel(), exact_bf16)


def test_loaded_arrays_run_attention(tmp_path, rng):
    q, k, v = (rng.standard_normal((1, 2, 9, 64)).astype(np.float16) for _ in range(3))
    pasa.save(tmp_path / "qkv.safetensors", {"q": q, "k": k, "v": v})
    t = pasa.load(tmp_path / "qkv.safetensors")
    np.testing.assert_array_equal(pasa.attention(t["q"], t["k"], t["v"]), pasa.attention(q, k, v))


def test_numpy_scalars_save_as_0d_arrays_and_rank_9_raises(tmp_path):
    pasa.save(tmp_path / "s.npy", np.float32(1.5))
    loaded = pasa.load(tmp_path / "s.npy")
    assert loaded.shape == () and loaded.dtype == np.float32 and loaded == 1.5
    pasa.save(tmp_path / "r8.npy", np.ones((1,) * 8, np.float16))
    with pytest.raises(pasa.PasaError, match=r"rank 9 exceeds the maximum of 8"):
        pasa.save(tmp_path / "r9.npy", np.ones((1,) * 9, np.float32))


def test_save_errors(tmp_path, rng):
    x = rng.standard_normal((2, 3))
    with pytest.raises(pasa.PasaError, match=r"x\.npy: unsupported dtype float64"):
        pasa.save(tmp_path / "x.npy", x)
    with pytest.raises(pasa.PasaError, match=r"tensor 'a': unsupported dtype int64"):
        pasa.save(tmp_path / "x.safetensors", {"a": np.arange(4)})
    with pytest.raises(pasa.PasaError, match=r"a \.npy file holds one array"):
        pasa.save(tmp_path / "x.npy", {"a": x.astype(np.float32)})
    with pytest.raises(pasa.PasaError, match=r"holds named tensors; pass a dict"):
        pasa.save(tmp_path / "x.safetensors", x.astype(np.float32))
    with pytest.raises(pasa.PasaError, match=r"unknown file type \(expected \.npy or \.safet"):
        pasa.save(tmp_path / "x.pt", x.astype(np.float32))
    with pytest.raises(pasa.PasaError, match=r"tensor names must be non-empty strings"):
        pasa.save(tmp_path / "x.safetensors", {"": x.astype(np.float32)})
    with pytest.raises(pasa.PasaError, match=r"^path: expected a file path, got int"):
        pasa.save(3, x.astype(np.float32))


def test_torch_tensors_without_dense_values_are_refused_by_save(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    for x, kind in ((torch.eye(3).to_sparse(), "torch.sparse_coo"),
                    (torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8), "quantized"),
                    (torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]), "nested")):
        with pytest.raises(pasa.PasaError, match=rf"x\.npy: a {kind} tensor"):
            pasa.save(tmp_path / "x.npy", x)
        assert not (tmp_path / "x.npy").exists()


def test_ml_dtypes_bfloat16_arrays_are_refused_by_save(tmp_path, rng):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    x = rng.standard_normal((2, 3)).astype(ml_dtypes.bfloat16)
    for name, data in (("x.npy", x), ("x.safetensors", {"a": x})):
        with pytest.raises(pasa.PasaError, match=r"NumPy arrays of ml_dtypes' bfloat16 cannot be saved"):
            pasa.save(tmp_path / name, data)
        assert not (tmp_path / name).exists()


def test_load_errors(tmp_path):
    with pytest.raises(pasa.PasaError, match="missing.npy"):
        pasa.load(tmp_path / "missing.npy")
    with pytest.raises(pasa.PasaError, match=r"unknown file type"):
        pasa.load(tmp_path / "x.txt")
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"\x93NUMPY\x01\x00garbage")
    with pytest.raises(pasa.PasaError, match="bad.npy"):
        pasa.load(bad)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(pasa.PasaError, match="bad.safetensors"):
        pasa.load(bad)
    # Empty, but with dimensions no array can have: refused as NumPy would, naming the file.
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4611686018427387904, 4611686018427387904), }"
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    huge = tmp_path / "huge.npy"
    huge.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    with pytest.raises(pasa.PasaError, match=r"huge.npy: element count of shape .* overflows 63 bits"):
        pasa.load(huge)


def test_truncated_files(tmp_path, rng):
    pasa.save(tmp_path / "t.safetensors", {"q": rng.standard_normal((4, 8)).astype(np.float32)})
    data = (tmp_path / "t.safetensors").read_bytes()
    for cut in (0, 7, 12, len(data) // 2, len(data) - 1):
        (tmp_path / "cut.safetensors").write_bytes(data[:cut])
        with pytest.raises(pasa.PasaError, match="cut.safetensors"):
            pasa.load(tmp_path / "cut.safetensors")
    pasa.save(tmp_path / "t.npy", rng.standard_normal((4, 8)).astype(np.float32))
    data = (tmp_path / "t.npy").read_bytes()
    for cut in (0, 5, 20, len(data) - 1):
        (tmp_path / "cut.npy").write_bytes(data[:cut])
        with pytest.raises(pasa.PasaError, match="cut.npy"):
            pasa.load(tmp_path / "cut.npy")


def test_a_path_with_a_nul_is_refused_not_cut(tmp_path):
    # The C++ side took the name up to the NUL: this saved over notes.txt, and loaded a.npy.
    notes = tmp_path / "notes.txt"
    notes.write_text("keep")
    pasa.save(tmp_path / "a.npy", np.ones(2, np.float32))
    x = np.zeros(2, np.float32)
    for call in (lambda: pasa.save(f"{notes}\0.npy", x),
                 lambda: pasa.save(f"{notes}\0.safetensors", {"x": x}),
                 lambda: pasa.load(f"{tmp_path}/a.npy\0.npy"),
                 lambda: pasa.load(f"{tmp_path}/a.npy\0.safetensors")):
        with pytest.raises(pasa.PasaError, match=r"^path: '.*\\x00\.(npy|safetensors)' contains a NUL"):
            call()
    with pytest.raises(pasa.PasaError, match=r"^directory: '.*\\x00x' contains a NUL"):
        pasa.capture(f"{tmp_path}/cap\0x")  # (checked before torch is needed)
    assert notes.read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "notes.txt"]


def test_file_names_that_are_not_utf8_round_trip(tmp_path, rng):
    # os.listdir gives such names as surrogate escapes; they were nanobind TypeErrors.
    x = rng.standard_normal((2, 3)).astype(np.float32)
    for name, data in (("\udcff.npy", x), ("\udcfe.safetensors", {"x": x})):
        path = tmp_path / name
        pasa.save(path, data)
        assert name in os.listdir(tmp_path)
        for given in (path, str(path), os.fsencode(path)):  # bytes paths too
            loaded = pasa.load(given)
            np.testing.assert_array_equal(loaded if name.endswith(".npy") else loaded["x"], x)
    with pytest.raises(pasa.PasaError, match=r"/\\xfd\.npy: cannot open for reading"):
        pasa.load(tmp_path / "\udcfd.npy")  # (the C++ message shows the byte)
    with pytest.raises(pasa.PasaError, match="path: .* lone surrogate"):
        pasa.save(tmp_path / "\ud800.npy", x)  # no byte stands behind it
