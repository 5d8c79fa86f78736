"""Traces written by the tests in the format torch's profiler (kineto over CUPTI) writes:
what the corpus's traces (../shared/corpus/traces) hold, so the readers and the timeline's
arithmetic are checked in a clean clone too.

A training step as a GPU trace records it: its ProfilerStep, the DataLoader's wait (the
GPU idle), the batch's copy to the device (pageable memory, its bytes), a forward of
matrix products and activations launched kernel by kernel (with their input shapes and
types), a backward, an all-reduce on its own stream (a rank of a data-parallel job), the
optimizer, and the loss read back (a synchronisation and a copy to the host). Each
runtime call, its kernel and the ``ac2g`` flow between them share a correlation id.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

GEMM = "ampere_sgemm_128x64_tn"
ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::"
               "(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&)>")
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_097_971_712,
        "computeMajor": 8, "computeMinor": 0, "numSms": 108}


class Writer:
    """Events in kineto's format: operators, runtime calls and the device work they
    launch (one compute stream, 7, in order; others as given)."""

    def __init__(self, shapes: bool) -> None:
        self.events: list[dict] = []
        self.corr = 0
        self.ext = 0
        self.gpu = 0.0  # when the compute stream is free
        self.shapes = shapes

    def x(self, name: str, ts: float, dur: float, cat: str, pid: int = 1, tid: int = 1,
          **args) -> dict:
        event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts,
                 "dur": dur, "args": args}
        self.events.append(event)
        return event

    def op(self, name: str, ts: float, dur: float, dims=None, types=None) -> None:
        self.ext += 1
        args = {"External id": self.ext, "Sequence number": self.ext}
        if self.shapes and dims is not None:
            args.update({"Input Dims": dims, "Input type": types})
        self.x(name, ts, dur, "cpu_op", **args)

    def launch(self, ts: float, kernel: str, dur: float, cat: str = "kernel",
               call: str = "cudaLaunchKernel", stream: int = 7, nbytes: int | None = None,
               at: float | None = None) -> float:
        """A runtime call at ``ts`` (5 us) and its device work of ``dur`` us on ``stream``,
        started when the stream is free and the call has returned (or at ``at``)."""
        self.corr += 1
        self.x(call, ts, 5, "cuda_runtime", correlation=self.corr, cbid=211)
        start = at if at is not None else max(ts + 5 + 2, self.gpu if stream == 7 else 0)
        args = {"device": 0, "context": 1, "stream": stream, "correlation": self.corr}
        if nbytes is not None:
            args["bytes"] = nbytes
        self.x(kernel, start, dur, cat, pid=0, tid=stream, **args)
        self.events += [{"ph": "s", "id": self.corr, "pid": 1, "tid": 1, "ts": ts,
                         "cat": "ac2g", "name": "ac2g"},
                        {"ph": "f", "id": self.corr, "pid": 0, "tid": stream, "ts": start,
                         "cat": "ac2g", "name": "ac2g", "bp": "e"}]
        if stream == 7:
            self.gpu = start + dur
        return start + dur


def training_trace(steps: int = 3, *, data_us: float = 400.0, kernel_us: float = 60.0,
                   rank: int | None = None, allreduce_us: float | None = None,
                   device: dict | None = A100, shapes: bool = True) -> dict:
    """The trace as a dict: ``steps`` training steps of a three-layer MLP; the DataLoader
    waits ``data_us`` each step, the products' kernels take ``kernel_us``; with ``rank``
    an all-reduce of the gradients (``allreduce_us``, three products' time unless given)
    and the job's distributedInfo."""
    w = Writer(shapes)
    f32 = ["float", "float", "float"]
    t = 100.0
    for step in range(1, steps + 1):
        begin = t
        w.x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, data_us,
            "user_annotation")
        t += data_us + 5
        # the batch to the device: aten::to > _to_copy > copy_ > cudaMemcpyAsync
        w.op("aten::to", t, 40)
        w.op("aten::_to_copy", t + 1, 38)
        w.op("aten::copy_", t + 2, 36)
        w.launch(t + 10, "Memcpy HtoD (Pageable -> Device)", 25, cat="gpu_memcpy",
                 call="cudaMemcpyAsync", nbytes=64 * 512 * 4)
        t += 45
        forward = t
        for _ in range(3):
            w.op("aten::linear", t, 40)
            w.op("aten::addmm", t + 2, 30, dims=[[512], [64, 512], [512, 512]], types=f32)
            w.launch(t + 10, GEMM, kernel_us)
            w.op("aten::relu", t + 42, 18, dims=[[64, 512]], types=["float"])
            w.launch(t + 45, ELEMENTWISE, 6)
            t += 62
        w.x("forward", forward, t - forward, "user_annotation")
        backward = t
        for _ in range(6):
            w.op("aten::mm", t, 28, dims=[[64, 512], [512, 512]], types=["float", "float"])
            w.launch(t + 8, GEMM, kernel_us)
            t += 30
        if rank is not None:
            w.op("c10d::allreduce_", t, 20)
            reduced = w.launch(t + 5, ALLREDUCE, allreduce_us or 3 * kernel_us, stream=20,
                               at=t + 12)
            w.gpu = max(w.gpu, reduced)  # the optimizer's kernels wait for the gradients
            t += 22
        w.x("backward", backward, t - backward, "user_annotation")
        opt = t
        for _ in range(3):
            w.op("aten::add_", t, 12, dims=[[512, 512], [512, 512], []],
                 types=["float", "float", "Scalar"])
            w.launch(t + 4, ELEMENTWISE, 4)
            t += 14
        w.x("Optimizer.step#SGD.step", opt, t - opt, "user_annotation")
        # loss.item(): wait for the device, copy 4 bytes back
        w.op("aten::item", t, 10)
        w.op("aten::_local_scalar_dense", t + 1, 8)
        done = w.launch(t + 2, "Memcpy DtoH (Device -> Pinned)", 2, cat="gpu_memcpy",
                        call="cudaMemcpyAsync", nbytes=4)
        w.x("cudaStreamSynchronize", t + 8, max(done - (t + 8), 1.0), "cuda_runtime",
            correlation=0)
        t = max(t + 12, done + 3)
        w.x(f"ProfilerStep#{step}", begin - 2, t - begin + 4, "user_annotation")
        t += 10
    doc: dict = {"schemaVersion": 1, "traceEvents": w.events,
                 "deviceProperties": [device] if device else []}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    return doc


def write(path: Path, doc: dict) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


# The project's own trace (tests/fixtures/traces): `transformer` at the `large` preset in
# training on an H200, written by torch 2.11 (2026-12-04).
H200_TRAIN = Path(__file__).parent / "fixtures" / "traces" / "h200-transformer-large-train.json.gz"
