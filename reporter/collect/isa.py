"""Keep oneDNN off CPU instructions that the machine lists but cannot run.

Some virtual machines report Intel AMX (``amx_tile`` in /proc/cpuinfo, and the kernel
grants the permission) while the hypervisor traps the instructions: torch's first
bf16 matrix product then kills the process with SIGILL ("Illegal instruction"), no
exception, no report. Seen on the 2-core development machine (Xeon with AMX, a
Firecracker guest): ``torch.randn(64, 64).bfloat16() @ ...`` dies; capped at
AVX512_CORE_FP16 it runs.

``guard()`` tries one small bf16 product in a forked child before this process uses
oneDNN; if the child dies of SIGILL, it caps oneDNN's instruction set through
``ONEDNN_MAX_CPU_ISA`` (read by oneDNN at its first use) and says so once. A cap the
user set is left alone.
"""

from __future__ import annotations

import os
import signal
import sys
import time

CAP = "AVX512_CORE_FP16"  # the widest set below AMX
_done = False


def _lists_amx() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return "amx_tile" in line.split()
    except OSError:
        pass
    return False


def _amx_traps() -> bool:
    """Does a bf16 matrix product kill a forked child with SIGILL?"""
    import torch

    pid = os.fork()
    if pid == 0:  # the child: one small product, then leave without cleaning up
        try:
            import faulthandler

            faulthandler.disable()  # the trap is expected: no "Fatal Python error" dump
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            torch.set_num_threads(1)  # an OpenMP pool inherited through fork may hang
            a = torch.ones(64, 64, dtype=torch.bfloat16)
            torch.mm(a, a)
        finally:
            os._exit(0)
    deadline = time.monotonic() + 10
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGILL
        if time.monotonic() > deadline:  # hung, not trapped: leave oneDNN as it is
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return False
        time.sleep(0.005)


def guard() -> None:
    """Cap oneDNN below AMX when AMX traps here (once per process; Linux only)."""
    global _done
    if _done:
        return
    _done = True
    if (not sys.platform.startswith("linux") or "ONEDNN_MAX_CPU_ISA" in os.environ
            or "DNNL_MAX_CPU_ISA" in os.environ or not _lists_amx()):
        return
    if _amx_traps():
        os.environ["ONEDNN_MAX_CPU_ISA"] = CAP
        print(f"reporter: this CPU lists AMX but traps its instructions (a virtual "
              f"machine): oneDNN is capped at {CAP}", file=sys.stderr, flush=True)
