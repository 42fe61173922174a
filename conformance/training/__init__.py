"""Training-level properties: DistributedDataParallel on n ranks against one process on the whole batch.

The controller draws a TrainingCase (strategies.py), the warm rank pool trains it with DDP
(ranks.py), a float64 NumPy reference trains the same model on the whole batch (oracle.py), and
check.py compares the two under the tolerances it states. docs/training-properties.md has the
properties, the uneven-split rule and the reasoning behind the tolerances.

  model.py       the model family (an MLP with optional bias, buffer and branch), its initial state
  case.py        what one drawn example holds; the batch split rule and per-sample loss weights
  oracle.py      the NumPy reference: forward, backward, SGD / Adam, k steps
  ranks.py       the rank side: build, wrap in DDP, train, return gradients and parameters
  check.py       tolerances and comparisons, with failure lines naming rank, parameter and step
  strategies.py  hypothesis draws, one per property
  driver.py      run a case on a pool and classify it in the capability report's vocabulary
"""
