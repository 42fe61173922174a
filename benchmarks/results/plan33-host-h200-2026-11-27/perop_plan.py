import time, torch
from simgpu.cuda_sim import plan_host, plan
x = torch.randn(64, 64, device="cuda")
w = torch.randn(64, 64, device="cuda", requires_grad=True)
lin = torch.nn.Linear(64, 64).cuda()
ws = [torch.randn(64, device="cuda") for _ in range(50)]
def run(f, n=500):
    R = plan.RECORDER
    c = R.current
    p0, c0, d0 = c["program_cpu_us"], c["torch_calls"], c["dispatches"]
    t0 = time.thread_time()
    for _ in range(n): f()
    total = (time.thread_time() - t0) / n * 1e6
    prog = (c["program_cpu_us"] - p0) / n; calls = (c["torch_calls"] - c0) / n; disp = (c["dispatches"] - d0) / n
    m = R.host_model
    own = prog - (calls * m.per_call + disp * m.per_entry) * R.probe_us
    print(f"{f.__name__:10s} total {total:7.1f} us  program {prog:7.1f}  calls {calls:5.1f} disp {disp:5.1f} own {own:7.1f} box {own*plan_host.REFERENCE_PROBE_US/R.probe_us:6.1f}")
def add(): x + x
def view(): x.view(-1)
def mm(): x @ x
def linear(): torch.nn.functional.linear(x, w)
def module(): lin(x)
def fwdbwd(): (x @ w).sum().backward()
def foreach(): torch._foreach_add_(ws, 1.0)
R = plan.RECORDER
R._calibrating = True; R._calibrate(); R._calibrating = False; print(R.host_model, R.probe_us)
for f in (add, view, mm, linear, module, fwdbwd, foreach): run(f)
print("depth", plan_host._thread.__dict__.get("depth"), plan.RECORDER.current is R.current, len(R.steps))
c = R.current; print(c["torch_calls"]); torch._foreach_add_(ws, 1.0); print(c["torch_calls"], plan_host._thread.__dict__.get("calls"))
