"""gpushare's Python start-up hook (on PYTHONPATH through `gpushare run`).

When the program imports torch, gpushare_release is set up beside it (it releases PyTorch's
cached GPU memory while other gpushare clients wait, for clients with release_cache = true).
Then the next sitecustomize module on sys.path runs, as it would have without this one.
Nothing here may break the program: every failure is silent.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds torch through the other finders and sets up gpushare_release once it has loaded."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                import gpushare_release

                gpushare_release.install(module)
            except Exception:
                pass

        spec.loader.exec_module = exec_module
        return spec


def _chain():
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if os.environ.get("GPUSHARE_RELEASE_CACHE", "1") != "0" and "torch" not in sys.modules:
    sys.meta_path.insert(0, _AfterTorch())
try:
    _chain()
except Exception:
    pass
