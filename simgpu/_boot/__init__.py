"""The directory `simgpu run` puts first on PYTHONPATH: its sitecustomize.py starts the simulation
in every Python process of the run (the script, mp.spawn children, torchrun workers)."""
