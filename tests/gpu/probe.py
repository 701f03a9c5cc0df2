#!/usr/bin/env python3
"""What the GPU machine offers the mechanisms rcoll's GPU path can use,
asked of the CUDA driver itself (ctypes on libcuda.so.1, no toolkit or
PyTorch needed). Prints one JSON object:

  device      name, compute capability, SMs, copy engines, driver version
  attributes  the device attributes that decide a mechanism: stream memory
              operations, host registration, VMM and its POSIX-fd export,
              GPUDirect RDMA, dma-buf, IPC events, MPS
  streammem   cuStreamWaitValue32 on pinned host memory: the stream holds
              until the host writes the flag, then runs the write queued
              behind it (and how long that took)
  ipc         a cuMemAlloc buffer's legacy IPC handle opened by a second
              process: it reads the first's bytes and its writes are seen
  dmabuf      cuMemGetHandleForAddressRange(DMA_BUF_FD) on a device buffer
Usage: probe.py [ipc-child HANDLEHEX BYTES]"""
import ctypes as C
import json
import subprocess
import sys
import time

cu = C.CDLL("libcuda.so.1")
CUdeviceptr = C.c_uint64


def chk(name, r):
    if r != 0:
        s = C.c_char_p()
        cu.cuGetErrorString(r, C.byref(s))
        raise RuntimeError("%s: CUDA error %d (%s)" % (name, r, s.value))


def call(name, *args):
    chk(name, getattr(cu, name)(*args))


def ctx():
    call("cuInit", 0)
    dev = C.c_int()
    call("cuDeviceGet", C.byref(dev), 0)
    c = C.c_void_p()
    call("cuDevicePrimaryCtxRetain", C.byref(c), dev)
    call("cuCtxSetCurrent", c)
    return dev


ATTRS = {
    "compute_capability_major": 75, "multiprocessor_count": 16,
    "async_engine_count": 40, "unified_addressing": 41,
    "can_use_host_pointer_for_registered_mem": 91,
    "can_use_stream_mem_ops_v1": 92, "can_use_64_bit_stream_mem_ops_v1": 93,
    "can_use_stream_wait_value_nor_v1": 94, "can_flush_remote_writes": 98,
    "host_register_supported": 99, "virtual_memory_management_supported": 102,
    "handle_type_posix_file_descriptor_supported": 103,
    "gpu_direct_rdma_with_cuda_vmm_supported": 110,
    "memory_pools_supported": 115, "gpu_direct_rdma_supported": 116,
    "gpu_direct_rdma_flush_writes_options": 117, "dma_buf_supported": 124,
    "ipc_event_supported": 125, "mps_enabled": 133, "host_numa_id": 134,
}


def attributes(dev):
    out = {}
    for k, a in ATTRS.items():
        v = C.c_int(-99)
        r = cu.cuDeviceGetAttribute(C.byref(v), a, dev)
        out[k] = v.value if r == 0 else "error %d" % r
    return out


def streammem():
    host = C.c_void_p()
    call("cuMemHostAlloc", C.byref(host), C.c_size_t(8), 0x03)  # PORTABLE | DEVICEMAP
    flags = (C.c_uint32 * 2).from_address(host.value)
    flags[0] = flags[1] = 0
    dflag = CUdeviceptr()
    call("cuMemHostGetDevicePointer_v2", C.byref(dflag), host, 0)
    s = C.c_void_p()
    call("cuStreamCreate", C.byref(s), 1)  # NON_BLOCKING
    # stream: wait flags[0] >= 1 (GEQ = 0), then write flags[1] = 7
    call("cuStreamWaitValue32_v2", s, dflag, C.c_uint32(1), 0)
    call("cuStreamWriteValue32_v2", s, CUdeviceptr(dflag.value + 4),
         C.c_uint32(7), 0)
    time.sleep(0.2)
    held = flags[1] == 0 and cu.cuStreamQuery(s) != 0
    t0 = time.perf_counter()
    flags[0] = 1
    while flags[1] != 7 and time.perf_counter() - t0 < 5:
        pass
    dt = time.perf_counter() - t0
    call("cuStreamSynchronize", s)
    return {"held_until_host_write": bool(held), "released": flags[1] == 7,
            "host_write_to_stream_write_us": round(dt * 1e6, 1)}


def ipc_parent():
    n = 1 << 20
    d = CUdeviceptr()
    call("cuMemAlloc_v2", C.byref(d), C.c_size_t(n))
    call("cuMemsetD32_v2", d, C.c_uint32(0x5A5A1234), C.c_size_t(n // 4))
    call("cuCtxSynchronize")
    h = (C.c_char * 64)()
    call("cuIpcGetMemHandle", h, d)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, __file__, "ipc-child",
                        bytes(h).hex(), str(n)], capture_output=True, text=True,
                       timeout=60)
    dt = time.perf_counter() - t0
    back = (C.c_uint32 * 1)()
    call("cuMemcpyDtoH_v2", back, d, C.c_size_t(4))
    return {"child": p.stdout.strip() or p.stderr.strip()[-300:],
            "child_exit": p.returncode,
            "child_write_seen": back[0] == 0xC0FFEE,
            "child_seconds": round(dt, 2)}


def ipc_child(hexh, n):
    ctx()
    h = (C.c_char * 64).from_buffer_copy(bytes.fromhex(hexh))
    d = CUdeviceptr()
    t0 = time.perf_counter()
    call("cuIpcOpenMemHandle_v2", C.byref(d), h, 1)
    dt = time.perf_counter() - t0
    buf = (C.c_uint32 * (n // 4))()
    call("cuMemcpyDtoH_v2", buf, d, C.c_size_t(n))
    ok = all(x == 0x5A5A1234 for x in buf)
    call("cuMemsetD32_v2", d, C.c_uint32(0xC0FFEE), C.c_size_t(1))
    call("cuCtxSynchronize")
    call("cuIpcCloseMemHandle", d)
    print(json.dumps({"read_ok": ok, "open_us": round(dt * 1e6, 1)}))


def dmabuf():
    n = 2 << 20
    d = CUdeviceptr()
    call("cuMemAlloc_v2", C.byref(d), C.c_size_t(2 * n))
    a = (d.value + n - 1) & ~(n - 1)
    fd = C.c_int(-1)
    r = cu.cuMemGetHandleForAddressRange(C.byref(fd), CUdeviceptr(a),
                                         C.c_size_t(n), 1, C.c_ulonglong(0))
    return {"result": r, "fd_ok": fd.value >= 0}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "ipc-child":
        ipc_child(sys.argv[2], int(sys.argv[3]))
        return
    dev = ctx()
    out = {}
    name = C.create_string_buffer(128)
    call("cuDeviceGetName", name, 128, dev)
    ver = C.c_int()
    call("cuDriverGetVersion", C.byref(ver))
    out["device"] = {"name": name.value.decode(), "driver_api": ver.value}
    out["attributes"] = attributes(dev)
    for k, f in (("streammem", streammem), ("ipc", ipc_parent),
                 ("dmabuf", dmabuf)):
        try:
            out[k] = f()
        except Exception as e:  # noqa: BLE001 - a probe reports, never stops
            out[k] = {"error": str(e)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
