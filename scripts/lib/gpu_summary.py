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

for n in (2, 4):
    j = load(f"all_reduce_{n}.json")
    if not j:
        print(f"all_reduce {n} ranks on one GPU: no results")
        continue
    cells = ", ".join(f"{r['size'] >> 20}M {r['busbw']:.0f}" for r in rows(j))
    wrong = sum(r["wrong"] for r in j["results"])
    print(f"all_reduce {n} ranks on one GPU ({j.get('device', '')}), busbw GB/s out of place: {cells}; #wrong {wrong}")
    last = rows(j)[-1] if rows(j) else None
    if n == 2 and last and copy_rate.get(256 << 20) and last["size"] == 256 << 20:
        # 2 ranks on one GPU: each of the 2 x S bytes is read and written twice (input and
        # output, and through a FIFO slot): 8S of traffic for the pair, so the bound on busbw
        # (= S / time for 2 ranks) is copy rate / 8.
        bound = copy_rate[256 << 20] / 8 / 1e9
        print(f"  256 MiB: {last['time_us']:.0f} us, busbw {last['busbw']:.0f} GB/s = {last['busbw'] / bound:.2f} of the "
              f"8S/copy-rate bound ({bound:.0f} GB/s; goal 1/1.3 = 0.77)")

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
