"""Run under `simgpu run` (no torch here: this parent is not served): start a torch program that leaves
work for the interpreter's exit (a non-daemon thread, a thread pool's job, atexit and weakref.finalize
handlers, logging to a file, a file written and never closed, a C stdio line, an object whose __del__
prints, alive at exit) and ends four ways; print
each child's exit status, stdout, stderr tail and files, one JSON line each."""
import json
import os
import subprocess
import sys
import tempfile

CHILD = r'''
import atexit, concurrent.futures, ctypes, logging, sys, threading, time, weakref
import torch
folder, how = sys.argv[1], sys.argv[2]
with open(folder + "/served", "w") as f:
    f.write(str(b"template_main" in open("/proc/%d/cmdline" % __import__("os").getppid(), "rb").read()))
kept = open(folder + "/unclosed.txt", "w")
kept.write("written, never flushed or closed\n")
logging.basicConfig(filename=folder + "/log.txt")
logging.warning("a warning logged")
print("stdout line, block-buffered")
ctypes.CDLL(None).printf(b"C stdio line\n")
atexit.register(print, "atexit handler ran")
class Obj:
    def __del__(self):
        print("__del__ ran")  # at the interpreter's teardown only: a fork skips it (docs/warm-template.md)
obj = Obj()
weakref.finalize(obj, print, "finalizer ran")
def late():
    time.sleep(0.3)
    print("non-daemon thread finished")
threading.Thread(target=late).start()
pool = concurrent.futures.ThreadPoolExecutor(1)
pool.submit(lambda: (time.sleep(0.2), print("thread pool job ran")))
if how == "message":
    sys.exit("exit with a message")
if how == "exit-259":
    sys.exit(259)
if how == "raise":
    raise RuntimeError("raised at top level")
'''

for how in ("end", "message", "exit-259", "raise"):
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run([sys.executable, "-c", CHILD, folder, how], capture_output=True, text=True, timeout=300)
        files = {name: open(os.path.join(folder, name)).read() for name in sorted(os.listdir(folder))}
    err = [ln for ln in done.stderr.splitlines() if "warm template" not in ln]
    print(json.dumps({"how": how, "code": done.returncode, "stdout": done.stdout.splitlines(),
                      "stderr": err[-2:], "files": files,
                      "notices": [ln for ln in done.stderr.splitlines() if "warm template" in ln]}), flush=True)
