"""The simulated-device suite: PyTorch's OpInfo database run on simulated GPUs, held to the host and
to a record of real CUDA (docs/simulated-device-suite.md)."""
