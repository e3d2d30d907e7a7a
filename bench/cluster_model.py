#!/usr/bin/env python3
"""How busy 64 nodes x 8 GPUs would keep their GPUs, by job length.

Calibrated with figures measured on this machine (bench/ranks.sh):
  --batched B     jobs/s through rank 0 with up to 256 jobs per MPI message
  --unbatched U   the same with one job per message
  --device-us D   a job's cost on its device beyond its kernel (host device,
                  execute time summed over jobs / jobs)

From 1/B = c + m/256 and 1/U = c + m: m, the cost of one MPI message, and c,
the cost of one job at rank 0 (placing it, packing its SUBMIT, reading its
COMPLETE). Both are upper bounds: on the 2-core machine every rank ran on the
same cores, so they include the other ranks' work as well.

A GPU running jobs of length L is busy at most L / (L + D); rank 0 can feed
at most 1 / (c + m / b) jobs per second (b jobs per message), and 512 GPUs
want 512 / L. The busy fraction is the smaller of the two bounds.
Prints a Markdown section.
"""
import argparse

p = argparse.ArgumentParser()
p.add_argument("--batched", type=float, required=True)
p.add_argument("--unbatched", type=float, required=True)
p.add_argument("--device-us", type=float, required=True)
p.add_argument("--nodes", type=int, default=64)
p.add_argument("--gpus", type=int, default=8)
p.add_argument("--batch", type=int, default=256)
a = p.parse_args()

tb, t1 = 1.0 / a.batched, 1.0 / a.unbatched
m = max(0.0, (t1 - tb) * a.batch / (a.batch - 1))
c = max(1e-9, tb - m / a.batch)
d = a.device_us * 1e-6
g = a.nodes * a.gpus


def busy(length, per_message_jobs):
    feed = 1.0 / (c + m / per_message_jobs)  # jobs/s rank 0 can place
    return min(length / (length + d), feed * length / g)


def needed(per_message_jobs, target=0.9):
    lo, hi = 1e-7, 100.0
    for _ in range(200):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if busy(mid, per_message_jobs) < target else (lo, mid)
    return hi


def fmt_len(s):
    return f"{s * 1e6:.0f} us" if s < 1e-3 else f"{s * 1e3:.0f} ms" if s < 1 else f"{s:.0f} s"


print(f"### Model: {a.nodes} nodes x {a.gpus} GPUs ({g} GPUs), one rank per node")
print()
print("`bench/cluster_model.py`, calibrated with the 2-rank figures above:")
print(f"c = {c * 1e6:.2f} us per job at rank 0, m = {m * 1e6:.2f} us per MPI message,")
print(f"D = {a.device_us:.2f} us per job on its device (upper bounds: see the script).")
print(f"Rank 0 can feed {1 / (c + m / a.batch):,.0f} jobs/s batched and {1 / (c + m):,.0f} one by one.")
print()
print("| job length | GPU busy, batched | GPU busy, one job per message |")
print("|---|---|---|")
for length in (10e-6, 30e-6, 100e-6, 300e-6, 1e-3, 3e-3, 10e-3, 100e-3, 1.0):
    print(f"| {fmt_len(length)} | {busy(length, a.batch) * 100:.1f}% | {busy(length, 1) * 100:.1f}% |")
print(f"| **length for 90% busy** | **{fmt_len(needed(a.batch))}** | **{fmt_len(needed(1))}** |")
print()
print("Below those lengths one rank 0 cannot place jobs fast enough for 512 GPUs;")
print("longer jobs, or several jobs' work per job, keep them busy.")
