"""Pool ranks bound to simulated GPUs (Binding device="simulated-cuda"): rank r sees cuda:r."""
from simgpu import Binding, RankPool
from tests import rank_fns


def test_each_rank_sees_its_simulated_gpu_and_nccl_placement() -> None:
    with RankPool(2, Binding("sim", device="simulated-cuda"), timeout=60) as pool:
        outcomes = pool.run(rank_fns.simulated_gpu_rank)
    assert all(o.ok for o in outcomes), [o.describe() for o in outcomes]
    for rank, o in enumerate(outcomes):
        where, values, refused = o.value
        assert where == f"cuda:{rank} current={rank} count=2"
        assert values == [3.0, 3.0]
        assert "No backend type associated with device type cpu" in refused and f"rank {rank}" in refused
