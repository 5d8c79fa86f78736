"""Per-rank traces in the format kineto writes (torch.profiler's export_chrome_trace on a
GPU job under torch.distributed), synthesised: for the tests and bench/ingest.py of a
folder of many ranks, without GPUs.

Each rank's file holds what kineto's does: the header (schemaVersion, deviceProperties,
distributedInfo with the rank and world size, baseTimeNanoseconds), process and thread
names (``ph: M``), the profiler's span, and per step a ``ProfilerStep#N`` annotation on the
host thread; inside it, per layer, ``aten::linear`` > ``aten::addmm`` launching a GEMM and
``aten::relu`` launching an elementwise kernel (``cudaLaunchKernel``, its correlation id
and the ``ac2g`` flow to the kernel on stream 7), then an all-reduce (``record_param_comms``
and ``c10d::allreduce_``) whose NCCL kernel runs on stream 20, and a synchronisation at
the step's end. Times in microseconds, as kineto writes them; each rank's jitter is drawn
from its own seed, so the folder is the same at every write.

The planted straggler's GEMMs take ``slow`` times as long (a slower GPU, say): its steps
are longer and its extra time is compute.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

PID, TID, GPU, STREAM, NCCL_STREAM = 4242, 4242, 0, 7, 20


def rank_trace(rank: int, world: int, steps: int = 3, layers: int = 4,
               slow: float = 1.0) -> dict:
    """The trace of one rank, as a dict ready for json.dumps."""
    rng = random.Random(rank)
    events: list[dict] = [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": PID, "tid": 0,
         "args": {"name": "python3"}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": PID, "tid": TID,
         "args": {"name": "thread 4242 (python3)"}},
        {"name": "process_name", "ph": "M", "ts": 0, "pid": GPU, "tid": 0,
         "args": {"name": "GPU 0"}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": GPU, "tid": STREAM,
         "args": {"name": "stream 7"}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": GPU, "tid": NCCL_STREAM,
         "args": {"name": "stream 20"}},
    ]
    ids = {"external": 0, "correlation": 0, "index": 0}

    def nxt(key: str) -> int:
        ids[key] += 1
        return ids[key]

    def host(name: str, ts: float, dur: float, cat: str = "cpu_op", **args) -> dict:
        event = {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID,
                 "ts": round(ts, 3), "dur": round(dur, 3),
                 "args": {"External id": nxt("external"), "Ev Idx": nxt("index"), **args}}
        events.append(event)
        return event

    def launch(op: dict, kernel: str, ts: float, start: float, dur: float,
               stream: int = STREAM) -> float:
        """cudaLaunchKernel at ts (inside op), its kernel from start on the stream."""
        corr = nxt("correlation")
        ext = op["args"]["External id"]
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                       "pid": PID, "tid": TID, "ts": round(ts, 3), "dur": 4.0,
                       "args": {"External id": ext, "cbid": 211, "correlation": corr}})
        events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": GPU, "tid": stream,
                       "ts": round(start, 3), "dur": round(dur, 3),
                       "args": {"External id": ext, "queued": 0, "device": GPU, "context": 1,
                                "stream": stream, "correlation": corr,
                                "registers per thread": 128, "shared memory": 49152,
                                "grid": [64, 8, 1], "block": [256, 1, 1],
                                "est. achieved occupancy %": 25}})
        events.append({"ph": "s", "id": corr, "pid": PID, "tid": TID, "ts": round(ts, 3),
                       "cat": "ac2g", "name": "ac2g"})
        events.append({"ph": "f", "id": corr, "pid": GPU, "tid": stream,
                       "ts": round(start, 3), "cat": "ac2g", "name": "ac2g", "bp": "e"})
        return start + dur

    t, base = 1000.0, 1000.0
    for step in range(steps):
        step_start = t
        step_ev = host(f"ProfilerStep#{step}", t, 0.0, cat="user_annotation")
        t += 5
        device = t  # when the stream is free
        for _ in range(layers):
            gemm = 200.0 * slow * (1 + 0.02 * rng.random())
            linear = host("aten::linear", t, 30.0, **_shapes([[64, 512], [512, 512], [512]]))
            addmm = host("aten::addmm", t + 2, 26.0, **_shapes([[512], [64, 512], [512, 512]]))
            device = launch(addmm, "ampere_sgemm_128x64_tn", t + 10, max(device, t + 14), gemm)
            linear["dur"] = addmm["dur"] + 4
            t += 34
            relu = host("aten::relu", t, 12.0, **_shapes([[64, 512]]))
            device = launch(relu, "void at::native::vectorized_elementwise_kernel<4, "
                            "at::native::(anonymous namespace)::launch_clamp_scalar>",
                            t + 4, max(device, t + 8), 6.0 * (1 + 0.05 * rng.random()))
            t += 16
        host("record_param_comms", t, 20.0, **{
            "Collective name": "allreduce", "dtype": "Float", "In msg nelems": 262144,
            "Out msg nelems": 262144, "Group size": world, "Process Group Name": "0",
            "Process Group Ranks": f"[{', '.join(map(str, range(min(world, 8))))}, ...]"})
        allreduce = host("c10d::allreduce_", t + 1, 18.0)
        device = launch(allreduce, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", t + 6,
                        max(device, t + 10), 150.0 * (1 + 0.02 * rng.random()),
                        stream=NCCL_STREAM)
        t += 22
        sync_end = max(t + 5, device + 3)
        host("cudaDeviceSynchronize", t, sync_end - t, cat="cuda_runtime", cbid=165,
             correlation=nxt("correlation"))
        t = sync_end + 5
        step_ev["dur"] = round(t - step_start, 3)
        t += 2
    events.insert(0, {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)",
                      "pid": "Spans", "tid": "PyTorch Profiler", "ts": base,
                      "dur": round(t - base, 3)})
    return {"schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3",
                                  "totalGlobalMem": 85_045_870_592, "computeMajor": 9,
                                  "computeMinor": 0, "maxThreadsPerBlock": 1024,
                                  "numSms": 132, "sharedMemPerBlock": 49152}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world,
                                "pg_count": 1, "nccl_version": "2.21.5"},
            "record_shapes": 1, "with_stack": 0, "traceEvents": events,
            "traceName": f"rank{rank}.pt.trace.json", "displayTimeUnit": "ms",
            "baseTimeNanoseconds": 1_765_000_000_000_000_000}


def _shapes(dims: list[list[int]]) -> dict:
    return {"Input Dims": dims, "Input type": ["float"] * len(dims),
            "Input Strides": [[d[-1], 1] if len(d) == 2 else [1] for d in dims],
            "Concrete Inputs": [""] * len(dims), "Record function id": 0,
            "Sequence number": 0, "Fwd thread id": 0}


def write_folder(folder: Path, ranks: int = 64, slow_rank: int = 37, slow: float = 1.5,
                 steps: int = 3, layers: int = 4) -> Path:
    """``ranks`` traces in ``folder`` (named as tensorboard_trace_handler names them), the
    rank ``slow_rank``'s GEMMs ``slow`` times as long; the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        trace = rank_trace(rank, ranks, steps, layers, slow if rank == slow_rank else 1.0)
        (folder / f"host{rank // 8}_{1000 + rank}.{rank}.pt.trace.json").write_text(
            json.dumps(trace))
    return folder
