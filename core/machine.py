"""What, besides the code, data and settings, determines a run's numbers (run.json ``environment``): thread counts,
the CPU instruction sets the kernels use, bf16 autocast, the deterministic-algorithm flags, and the builds of torch,
numpy and the BLAS (the library versions are run.json's ``versions``). docs/training.md ("Reproducibility") says which of them change predictions."""

from __future__ import annotations

import hashlib
import os
import platform
from importlib.metadata import PackageNotFoundError, version

BF16_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "KINJECT_THREADS", "OMP_WAIT_POLICY")


def cpu_info() -> tuple[str, set[str]]:
    """(the CPU's model name, its feature flags) from /proc/cpuinfo; ("", set()) where there is none."""
    name, flags = "", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name") and not name:
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return name or platform.processor(), flags


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def environment(bf16: bool | None) -> dict:
    """The run environment's numerics: recorded in run.json so that two runs' numbers can be told apart."""
    import torch

    cpu, flags = cpu_info()
    out = {
        "os": platform.platform(), "cpu": cpu, "cpu_count": os.cpu_count(),  # versions: run.json ``versions``
        "torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads(),
        "thread_variables": {name: os.environ[name] for name in THREAD_VARIABLES if name in os.environ},
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # the ISA of torch's own CPU kernels
        "bf16_autocast": bool(bf16), "cpu_bf16_flags": sorted(flags & set(BF16_FLAGS)),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn": {"deterministic": torch.backends.cudnn.deterministic, "benchmark": torch.backends.cudnn.benchmark},
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "torch_git": torch.version.git_version, "cuda": torch.version.cuda,
        "torch_build": hashlib.sha256(torch.__config__.show().encode()).hexdigest()[:16],  # compiler, BLAS, ISA flags
        "numpy": _version("numpy"),
    }
    try:
        from threadpoolctl import threadpool_info

        out["thread_pools"] = [{k: pool.get(k) for k in ("internal_api", "version", "num_threads", "architecture")}
                               for pool in threadpool_info()]
    except ImportError:  # threadpoolctl comes with scikit-learn; without it the pools go unrecorded
        pass
    return out
