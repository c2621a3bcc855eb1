"""Releases PyTorch's cached GPU memory at iteration boundaries while other gpushare clients
wait for the GPU, for clients whose gpushare config says release_cache = true.

An iteration boundary is the end of an optimizer step (training) or of an outermost module
call with gradients off (inference). There the hook library (libgpushare.so, preloaded) is
asked whether a hand-over of the GPU is due before the next iteration ends; if so the cached,
unused blocks of PyTorch's allocator are given back (torch.cuda.empty_cache()), so that the
hand-over moves less memory. Set up by gpushare's sitecustomize when torch is imported.
"""
import ctypes
import time

_due = None
_wanted = None
_last = [time.perf_counter_ns()]
_handles = []


def _library():
    global _due, _wanted
    try:
        lib = ctypes.CDLL(None)
        _due = lib.gpushare_release_due
        _wanted = lib.gpushare_release_wanted
    except (OSError, AttributeError):
        return False
    _due.argtypes = [ctypes.c_uint64]
    _due.restype = ctypes.c_int
    _wanted.argtypes = []
    _wanted.restype = ctypes.c_int
    return True


def _boundary(torch):
    now = time.perf_counter_ns()
    iteration_ns, _last[0] = now - _last[0], now
    wanted = _wanted()
    if wanted == 0:  # attached, and this client does not release: stop watching
        for h in _handles:
            h.remove()
        _handles.clear()
        return
    if wanted > 0 and _due(iteration_ns) and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def install(torch):
    """Watches torch's iteration boundaries; False when the hook library is not loaded."""
    if not _library():
        return False
    depth = [0]

    def step_done(optimizer, args, kwargs):
        try:
            _boundary(torch)
        except Exception:
            pass

    def forward_starts(module, args):
        depth[0] += 1

    def forward_done(module, args, output):
        depth[0] = max(0, depth[0] - 1)
        if depth[0] == 0 and not torch.is_grad_enabled():
            try:
                _boundary(torch)
            except Exception:
                pass

    from torch.nn.modules import module as nn_module
    from torch.optim import optimizer

    _handles.append(optimizer.register_optimizer_step_post_hook(step_done))
    _handles.append(nn_module.register_module_forward_pre_hook(forward_starts))
    try:
        _handles.append(nn_module.register_module_forward_hook(forward_done, always_call=True))
    except TypeError:
        _handles.append(nn_module.register_module_forward_hook(forward_done))
    return True
