"""Record what torch.cuda.Stream and Event answer on a GPU (the attributes the simulation must give).
    python benchmarks/cuda_references/stream_event_probe.py OUT.json"""
import json, sys, torch

def safe(f):
    try:
        v = f()
        return v if isinstance(v, (int, float, str, bool, type(None), list, tuple)) else repr(v)
    except Exception as e:  # noqa: BLE001 - recorded
        return f"{type(e).__name__}: {e}"

s_default = torch.cuda.default_stream()
s = torch.cuda.Stream()
hi, lo = torch.cuda.Stream(priority=-10), torch.cuda.Stream(priority=5)
e = torch.cuda.Event()
out = {
    "priority_range": list(torch.cuda.Stream.priority_range()),
    "priority_default": s.priority, "priority_-10": hi.priority, "priority_5": lo.priority,
    "priority_-1": torch.cuda.Stream(priority=-1).priority,
    "default_cuda_stream": s_default.cuda_stream, "default_stream_id": s_default.stream_id,
    "default_native_handle": safe(lambda: s_default.native_handle),
    "new_cuda_stream_is_int": isinstance(s.cuda_stream, int), "new_cuda_stream_nonzero": s.cuda_stream != 0,
    "is_capturing": safe(lambda: s.is_capturing()),
    "event_cuda_event_before_record": e.cuda_event, "event_device_before_record": safe(lambda: e.device),
    "event_id_before_record": safe(lambda: e.event_id),
}
e.record()
out.update({"event_cuda_event_after_record_nonzero": e.cuda_event != 0, "event_device_after_record": safe(lambda: str(e.device)),
            "event_id_after_record_nonzero": safe(lambda: e.event_id != 0),
            "ipc_handle_non_interprocess": safe(lambda: e.ipc_handle()),
            "torch": torch.__version__})
json.dump(out, open(sys.argv[1], "w"), indent=1)
print(json.dumps(out, indent=1))
