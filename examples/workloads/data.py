#!/usr/bin/env python3
"""Writes an example's inputs and the outputs NumPy computes from them, and a
copy of its config, into a directory:

    python3 examples/workloads/data.py gemm|dot|histogram|jacobi DIR
    sched-run DIR/gemm.yaml
    build/schedrun_jacobi host:2 DIR/jacobi_expected.npy

The inputs are random with a fixed seed, so every run checks the same numbers.
"""
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def gemm(rng, out):
    a = rng.standard_normal((512, 512), dtype=np.float32)
    b = rng.standard_normal((512, 512), dtype=np.float32)
    np.save(os.path.join(out, "a.npy"), a)
    np.save(os.path.join(out, "b.npy"), b)
    c = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    np.save(os.path.join(out, "c_expected.npy"), c)


def dot(rng, out):
    n = 16777216
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    np.save(os.path.join(out, "x.npy"), x)
    np.save(os.path.join(out, "y.npy"), y)
    d = np.dot(x.astype(np.float64), y.astype(np.float64))
    np.save(os.path.join(out, "dot_expected.npy"), np.array([d], dtype=np.float32))


def histogram(rng, out):
    data = rng.integers(0, 256, 1048576, dtype=np.uint8)
    np.save(os.path.join(out, "data.npy"), data)
    bins = np.bincount(data, minlength=256).astype(np.uint32)
    np.save(os.path.join(out, "bins_expected.npy"), bins)


def jacobi(rng, out):
    """examples/jacobi.c's grid after 100 steps: 256 x 256 points, rows of
    0 above the first and below the last, the first column held at
    row / 255 and the last at 0 (both from the first step on); every step
    each other point becomes the mean of its four neighbours, in float32 as
    the kernel adds them."""
    p = np.zeros((258, 256), dtype=np.float32)
    quarter = np.float32(0.25)
    for _ in range(100):
        q = p.copy()
        q[1:257, 1:255] = quarter * ((p[0:256, 1:255] + p[2:258, 1:255]) + (p[1:257, 0:254] + p[1:257, 2:256]))
        q[1:257, 0] = np.arange(256, dtype=np.float32) / np.float32(255)
        q[1:257, 255] = 0.0
        p = q
    np.save(os.path.join(out, "jacobi_expected.npy"), p[1:257, :])


EXAMPLES = {"gemm": gemm, "dot": dot, "histogram": histogram, "jacobi": jacobi}


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in EXAMPLES:
        sys.stderr.write("usage: data.py %s DIR\n" % "|".join(EXAMPLES))
        return 2
    name, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    EXAMPLES[name](np.random.default_rng(20261205), out)
    config = os.path.join(HERE, name + ".yaml")
    if os.path.exists(config):  # jacobi is a C program (examples/jacobi.c)
        shutil.copy(config, os.path.join(out, name + ".yaml"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
