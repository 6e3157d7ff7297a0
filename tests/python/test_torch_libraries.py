"""attnsuite and PyTorch in one process (the drop-in's case): whichever is imported first, both
import, and each CUDA library is loaded once, from torch's nvidia-* wheels where torch has a copy
(the version torch was built with; a build with the torch peers looks there first). Before, a CUDA
build linked the toolkit's older NCCL, and `import torch` after `import attnsuite` failed on
symbols it lacks (ncclCommResume); a toolkit cuDNN loaded first made torch's cuDNN check fail
("cuDNN version incompatibility: PyTorch was compiled against (9, 26, 0) but found runtime
version (9, 19, 0)").
Each case runs in a child interpreter, which imports the same attnsuite as this one."""
import glob
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

import attnsuite
from attnsuite import _core

if importlib.util.find_spec("torch") is None:
    pytest.skip("torch is not installed (ATTNSUITE_TORCH=1 scripts/setup-python.sh installs it)",
                allow_module_level=True)
if not _core.cuda_build:
    pytest.skip("a CPU build of attnsuite loads no CUDA library", allow_module_level=True)

# Imports both in the given order, uses each (the registry with every backend; a torch op), and
# prints the shared objects mapped into the process.
CHILD = r"""
import importlib, json, os, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
import attnsuite, torch
names = [b["name"] for b in attnsuite.backends()]
assert (torch.ones(3) * 2).sum().item() == 6
torch.backends.cudnn.version()  # raises where the cuDNN loaded is older than torch's
mapped = {}
for line in open("/proc/self/maps"):
    fields = line.split()
    if len(fields) >= 6 and ".so" in fields[5]:
        mapped.setdefault(os.path.basename(fields[5]), set()).add(os.path.realpath(fields[5]))
print(json.dumps({"backends": names, "mapped": {name: sorted(paths) for name, paths in mapped.items()}}))
"""

# The CUDA libraries that both the toolkit and PyPI's nvidia-* wheels ship.
CUDA_LIBRARY = re.compile(r"^(lib(?:cudart|cublas|cublasLt|cudnn|cudnn_\w+|nccl|nvrtc|nvJitLink|cusparse|cufft|"
                          r"curand|cusolver))\.so")


def torch_cuda_library_files():
    """{file name: real path} of torch's lib directory and the nvidia-* wheels beside it."""
    torch_dir = importlib.util.find_spec("torch").submodule_search_locations[0]
    site_packages = os.path.dirname(torch_dir)
    files = {}
    for directory in [os.path.join(torch_dir, "lib")] + sorted(glob.glob(os.path.join(site_packages, "nvidia", "*", "lib"))):
        for path in glob.glob(os.path.join(directory, "*.so*")):
            files.setdefault(os.path.basename(path), os.path.realpath(path))
    return files


@pytest.mark.parametrize("order", [("attnsuite", "torch"), ("torch", "attnsuite")], ids=lambda o: " then ".join(o))
def test_one_copy_of_each_cuda_library_and_torchs_where_it_has_one(order):
    # The attnsuite this process imported (conftest.py may have put the build tree on sys.path).
    package_parent = os.path.dirname(os.path.dirname(attnsuite.__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")])))
    child = subprocess.run([sys.executable, "-c", CHILD, *order], capture_output=True, text=True, timeout=300, env=env)
    assert child.returncode == 0, f"importing {' then '.join(order)} failed (exit {child.returncode}):\n{child.stderr[-2000:]}"
    report = json.loads(child.stdout.strip().splitlines()[-1])
    by_library = {}
    for name, paths in report["mapped"].items():
        match = CUDA_LIBRARY.match(name)
        if match:
            by_library.setdefault(match.group(1), set()).update(paths)
    assert "libcudart" in by_library, sorted(report["mapped"])
    twice = {library: sorted(paths) for library, paths in by_library.items() if len(paths) > 1}
    assert not twice, f"loaded more than once: {twice}"
    torch_files = torch_cuda_library_files()
    not_torchs = {name: paths[0] for name, paths in report["mapped"].items()
                  if CUDA_LIBRARY.match(name) and name in torch_files and paths[0] != torch_files[name]}
    assert not not_torchs, f"loaded from elsewhere than torch's wheels: {not_torchs}"


# The torch peers are a module of their own (libattnsuite_torch.so): attnsuite runs without
# libtorch until one of them is looked up.
LAZY_CHILD = r"""
import json, os
import numpy as np
import attnsuite

def mapped():
    return sorted({os.path.basename(line.split()[5]) for line in open("/proc/self/maps") if len(line.split()) >= 6})

q = np.random.default_rng(0).standard_normal((1, 64, 2, 32)).astype(np.float32)
attnsuite.attention(q, q, q, backend="cpu-flash")
before = mapped()
names = [b["name"] for b in attnsuite.backends()]
print(json.dumps({"before": before, "after": mapped(), "backends": names}))
"""


def test_libtorch_is_loaded_only_with_the_torch_peers():
    package_parent = os.path.dirname(os.path.dirname(attnsuite.__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")])))
    child = subprocess.run([sys.executable, "-c", LAZY_CHILD], capture_output=True, text=True, timeout=300, env=env)
    assert child.returncode == 0, child.stderr[-2000:]
    report = json.loads(child.stdout.strip().splitlines()[-1])
    if "torch-sdpa" not in report["backends"]:
        pytest.skip("this build has no torch peers")
    libtorch = {"libtorch_cpu.so", "libtorch_cuda.so", "libattnsuite_torch.so"}
    assert not libtorch & set(report["before"]), sorted(libtorch & set(report["before"]))
    assert libtorch <= set(report["after"]), sorted(libtorch - set(report["after"]))
