"""`python -m simgpu run --gpus N script.py`: the same as the `simgpu` command."""
import sys

from simgpu.launcher import main

sys.exit(main())
