"""The NumPy side of the modern families: DTensor's shard pieces are torch.chunk's, mesh slices are the
groups DeviceMesh forms, and the all_to_all oracle returns every piece to where it was sent."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conformance.collectives import dtensor, functional
from conformance.collectives.groups import groups_of, mesh_shapes
from conformance.spec import Case


@pytest.mark.parametrize("parts", range(1, 9))
def test_chunk_is_torch_chunk_padded_with_empty_pieces(parts: int) -> None:
    for length in range(0, 10):
        a = np.arange(length * 2).reshape(length, 2)
        pieces = torch.chunk(torch.from_numpy(a), parts, dim=0)
        for i in range(parts):
            want = pieces[i].numpy() if i < len(pieces) else a[:0]
            assert np.array_equal(dtensor.chunk(a, i, parts, 0), want), (length, parts, i)


def test_nested_shards_apply_mesh_dim_by_mesh_dim() -> None:
    a = np.arange(5 * 4).reshape(5, 4)
    # mesh (2, 2), Shard(0) then Shard(1): coordinate (1, 0) holds rows 3..4, then columns 0..1
    assert np.array_equal(dtensor.piece(a, [("S", 0), ("S", 1)], (1, 0), (2, 2)), a[3:5, 0:2])
    # both mesh dims shard dim 0: rows 0..2 first, then the second half of those
    assert np.array_equal(dtensor.piece(a, [("S", 0), ("S", 0)], (0, 1), (2, 2)), a[2:3])
    assert np.array_equal(dtensor.piece(a, [("R",), ("P", "sum")], (1, 1), (2, 2)), a)


def test_mesh_groups_are_the_slices_along_the_dim() -> None:
    assert mesh_shapes(4) == [(4,), (1, 4), (2, 2), (4, 1)]
    case = Case("funcol.all_reduce", 6, params={"group_kind": "mesh", "mesh": (2, 3), "mesh_dim": 0})
    assert groups_of(case) == [(0, 3), (1, 4), (2, 5), (0, 3), (1, 4), (2, 5)]
    case.params["mesh_dim"] = 1
    assert groups_of(case) == [(0, 1, 2), (0, 1, 2), (0, 1, 2), (3, 4, 5), (3, 4, 5), (3, 4, 5)]


def test_all_to_all_oracle_returns_what_each_rank_sent() -> None:
    m = [[0, 2, 1], [1, 0, 0], [2, 1, 3]]  # m[i][j]: rows i sends to j
    inputs = [np.array([[10 * i + k] for k in range(sum(m[i]))], dtype=np.float32) for i in range(3)]
    case = Case("funcol.all_to_all_single", 3, "float32", inputs=inputs,
                params={"group_kind": "pg", "rows": m, "even": False})
    got = [functional.expected(case, j)[1].ravel().tolist() for j in range(3)]
    assert got == [[10, 20, 21], [0, 1, 22], [2, 23, 24, 25]]
