"""Loads the suite's pytest plugin (its options: --backend, --conformance-profile, ...) for
`pytest conformance` only: installing simgpu adds nothing of it to other projects' runs."""
from conformance.plugin import *  # noqa: F401,F403 - the plugin's hooks and fixtures, by pytest's names
