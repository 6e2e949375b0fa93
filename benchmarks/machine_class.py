"""The machine class a CPU figure is measured on, and the emulation of a CPU without AVX512 and native bf16.

``label()`` names the class beside every figure (the CPU model, whether AVX512 / AVX512-BF16 / AMX are present, the
ISA cap). ``AVX2_ONLY`` caps the libraries that run the matmuls at AVX2 + FMA, the class of many laptops and lab
servers (e.g. an AMD EPYC without AVX512): MKL (fp32 sgemm), oneDNN (bf16 matmuls) and ATen's own kernels. The caps
are read when torch loads, so a capped measurement runs in a child process (:func:`capped_env`). Such a figure is
an emulation on the machine at hand, never a measurement of the real class: clock, caches and memory stay this
machine's; ``benchmarks.bench_peak`` checks that the cap changes the fp32 and bf16 matmul speeds before any figure
relies on it.
"""

from __future__ import annotations

import os

AVX2_ONLY = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
EMULATED = "AMX machine with ISA capped at AVX2 (emulation)"


def capped() -> bool:
    """Whether this process runs under the AVX2 cap."""
    return all(os.environ.get(k, "").lower() == v.lower() for k, v in AVX2_ONLY.items())


def capped_env(isa: str) -> dict[str, str]:
    """The environment of a child process measuring ``isa`` (native: this machine as it is; avx2: capped), OpenMP's
    wait policy as the kinject CLI sets it unless the environment sets one."""
    env = {"OMP_WAIT_POLICY": "PASSIVE", **{k: v for k, v in os.environ.items() if k not in AVX2_ONLY}}
    return {**env, **AVX2_ONLY} if isa == "avx2" else env


def label() -> str:
    """This process's machine class, as every figure is labelled."""
    from kinject.machine import cpu_info

    name, flags = cpu_info()
    has = [f for f, present in (("AVX512", "avx512f" in flags), ("AVX512-BF16", "avx512_bf16" in flags),
                                ("AMX", "amx_bf16" in flags)) if present]
    native = f"{name}, {os.cpu_count()} cores, {', '.join(has) or 'no AVX512, no native bf16'}"
    return f"{EMULATED}: {native}" if capped() else native
