"""One module per collective (or family); importing this package registers every spec in conformance.spec.SPECS."""
from conformance.collectives import (  # noqa: F401
    all_gather,
    all_reduce,
    all_to_all,
    barrier,
    batch_mix,
    broadcast,
    coalesced,
    dtensor,
    functional,
    functional_autograd,
    gather_scatter,
    objects,
    p2p,
    reduce,
    reduce_scatter,
)
