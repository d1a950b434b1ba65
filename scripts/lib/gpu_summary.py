"""The GPU check's short table of measurements (scripts/gpu-check.sh runs it last, with the
folder of logs and JSON as its argument). Every section copes with missing files: a step that
was skipped or killed leaves a line saying so, not a traceback."""
import glob
import json
import os
import sys

work = sys.argv[1]


def load(name):
    try:
        with open(os.path.join(work, name)) as f:
            return json.load(f)
    except Exception:
        return None


def rows(j, in_place=False):
    return [r for r in (j or {}).get("results", []) if r.get("in_place") == in_place]


copy_rate = {}  # bytes -> device-to-device copy, bytes read + written per second
k = load("kernels.json")
if k:
    table = {}
    for b in k.get("benchmarks", []):
        if b.get("error_occurred"):
            continue
        parts = b["name"].split("/")  # BM_x[/case]/bytes/manual_time
        size = int(parts[-2])
        name = " ".join(parts[:-2]).replace("BM_ReduceKernel ", "reduce ").replace("BM_", "")
        table.setdefault(name, {})[size] = b["bytes_per_second"]
        if parts[0] == "BM_DeviceMemcpy":
            copy_rate[size] = b["bytes_per_second"]
    big, small = 256 << 20, 4 << 20
    print(f"{'kernel (bytes read+written)':30} {'4 MiB GB/s':>10} {'256 MiB GB/s':>13} {'vs copy @256M':>14}")
    for name, v in table.items():
        ratio = v.get(big, 0) / copy_rate[big] if copy_rate.get(big) else 0
        print(f"{name:30} {v.get(small, 0) / 1e9:10.0f} {v.get(big, 0) / 1e9:13.0f} {ratio:14.2f}")
else:
    print("kernel benchmarks: no results")

# The 2-rank all_reduce beside a device copy of each size (dcomm-bench -g's copy_us: one
# cudaMemcpyAsync device to device, S bytes read and S written). 2 ranks on one GPU move 8S
# (each rank's S read and written twice: input to FIFO slot, slot to output, for both halves
# of the ring), so the bound is 4 copies' time; the target is 0.9 of it, and 0.55 ms at
# 256 MiB on an H200.
j = load("all_reduce_2.json")
if j:
    print(f"all_reduce 2 ranks on one GPU ({j.get('device', '')}), out of place; #wrong "
          f"{sum(r['wrong'] or 0 for r in j['results'])}")
    print(f"  {'size':>8} {'time us':>9} {'busbw GB/s':>10} {'copy us':>8} {'8S bound us':>11} {'of bound':>8}")
    for r in rows(j):
        copy = r.get("copy_us", 0)
        bound = 4 * copy
        frac = f"{bound / r['time_us']:8.2f}" if copy else f"{'-':>8}"
        print(f"  {r['size'] >> 20:>6}Mi {r['time_us']:9.0f} {r['busbw']:10.0f} {copy:8.0f} {bound:11.0f} {frac}")
    last = rows(j)[-1] if rows(j) else None
    if last and last["size"] == 256 << 20:
        t, copy = last["time_us"], last.get("copy_us", 0)
        met = t <= 550 and (not copy or t <= 4 * copy / 0.9)
        print(f"  target, 256 MiB: at most 550 us and 0.9 of the 8S bound ({4 * copy / 0.9:.0f} us): "
              f"{t:.0f} us, {'MET' if met else 'NOT MET'}")
else:
    print("all_reduce 2 ranks on one GPU: no results")
j = load("all_reduce_4.json")
if j:
    cells = ", ".join(f"{r['size'] >> 20}M {r['busbw']:.0f}" for r in rows(j))
    print(f"all_reduce 4 ranks on one GPU, busbw GB/s: {cells}; #wrong {sum(r['wrong'] or 0 for r in j['results'])}")

for c in ("reduce_scatter", "all_gather", "broadcast", "send_recv"):
    r = rows(load(f"{c}_2.json"))
    if r:
        r = r[-1]
        print(f"{c} 2 ranks {r['size'] >> 20} MiB: {r['time_us']:.0f} us, busbw {r['busbw']:.0f} GB/s, #wrong {r['wrong']}")
    else:
        print(f"{c} 2 ranks: no results")

base = rows(load("all_reduce_2.json"))
base_us = base[-1]["time_us"] if base and base[-1]["size"] == 256 << 20 else None
tunes = sorted(glob.glob(os.path.join(work, "tune_*.json")))
if tunes:
    print("tuning, all_reduce 2 ranks 256 MiB (time vs the default settings' run):")
    for path in tunes:
        r = rows(load(os.path.basename(path)))
        name = os.path.basename(path)[5:-5]
        if r:
            rel = f" = {r[-1]['time_us'] / base_us:.2f}x default" if base_us else ""
            print(f"  {name:12} {r[-1]['time_us']:8.0f} us  busbw {r[-1]['busbw']:5.0f} GB/s{rel}  #wrong {r[-1]['wrong']}")
        else:
            print(f"  {name:12} no results")
r = rows(load("all_reduce_2_procs.json"))
print(f"all_reduce 2 processes 64 MiB: {r[-1]['time_us']:.0f} us, busbw {r[-1]['busbw']:.0f} GB/s, #wrong {r[-1]['wrong']}"
      if r else "all_reduce 2 processes: no results")
try:
    with open(os.path.join(work, "one_sided.log")) as f:
        table = [line.rstrip() for line in f if line.strip() and (line.lstrip()[0].isdigit() or "size" in line)]
except OSError:
    table = []
print("one-sided put+signal on device memory, 2 ranks on one GPU:" if table else "one-sided: no results")
for line in table:
    print("  " + line)
