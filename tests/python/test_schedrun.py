"""The Python package: every README example, results element by element
against NumPy, errors, futures from many threads, graphs with Python host
tasks, the report and the timeline picture, and an interpreter that exits
with jobs in flight."""

import asyncio
import concurrent.futures
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

import schedrun

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
CONFIGS = os.environ.get("SCHEDRUN_CONFIGS", os.path.join(SOURCE, "configs"))

SCALE = """
version: 1
name: scale
kernels:
  scale:
    params: [ptr, f32, i32, f32]
    source: |
      extern "C" __global__ void scale(float *v, float by, int n, float add) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) v[i] = v[i] * by + add;
      }
buffers:
  v: {type: f32, count: 1000, shape: [10, 100], init: {iota: {start: 0, step: 1}}}
program:
  - launch: {kernel: scale, grid: 4, block: 256, args: [v, 3.0, 1000, "$job"]}
"""


@pytest.fixture(scope="module")
def s():
    with schedrun.open(devices="host:2") as sched:
        yield sched


def readme_python_blocks():
    text = open(os.path.join(SOURCE, "README.md")).read()
    section = text.split("## Python", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_readme_examples_run_as_shown():
    blocks = readme_python_blocks()
    assert blocks, "README.md has a Python section with examples"
    for code in blocks:
        out = subprocess.run([sys.executable, "-c", code], cwd=SOURCE, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        # what the example prints is what the README says it prints
        shown = re.search(r"# prints: (.*)", code)
        if shown:
            assert out.stdout.strip().splitlines()[-1] == shown.group(1).strip(), out.stdout


def test_load_from_path_and_text(s):
    p = s.load(os.path.join(CONFIGS, "saxpy.yaml"))
    assert p.name == "saxpy-loop"
    assert list(p.buffers) == ["x", "y", "out"]
    assert p.buffers["out"].dtype == np.float32 and p.buffers["out"].shape == (8192,)
    q = s.load(SCALE)
    assert q.name == "scale" and q.buffers["v"].shape == (10, 100)


def test_outputs_match_numpy_element_by_element(s):
    p = s.load(SCALE)
    # integers: a product and a sum that are exact, fused into one FMA or not
    v = np.random.default_rng(7).integers(-1000, 1000, 1000).astype(np.float32)
    futs = s.submit_many(p, [dict(inputs={"v": v}, job=j) for j in range(6)])
    for j, f in enumerate(futs):
        r = f.result(timeout=120)
        assert r.job == j and r.verified is True and r.status == 0  # no expectation failed
        got = r["v"]
        assert got.dtype == np.float32 and got.shape == (10, 100)
        want = (v * np.float32(3.0) + np.float32(j)).reshape(10, 100)
        np.testing.assert_array_equal(got, want)
    # without inputs: the init (0, 1, 2, ...)
    r = s.submit(p).result(timeout=120)
    np.testing.assert_array_equal(r["v"].ravel(), np.arange(1000, dtype=np.float32) * 3)


def test_inputs_from_any_buffer_object(s):
    p = s.load(SCALE)
    import array
    a = array.array("f", range(1000))
    r = s.submit(p, inputs={"v": a}).result(timeout=120)
    np.testing.assert_array_equal(r["v"].ravel(), np.arange(1000, dtype=np.float32) * 3)


def test_bad_inputs_name_what(s):
    p = s.load(SCALE)
    with pytest.raises(TypeError, match="input 'v': dtype float64, the buffer is f32"):
        s.submit(p, inputs={"v": np.zeros(1000)})
    with pytest.raises(ValueError, match="input 'v': 999 elements, the buffer has 1000"):
        s.submit(p, inputs={"v": np.zeros(999, np.float32)})
    with pytest.raises(ValueError, match="input 'w': program 'scale' has no such buffer"):
        s.submit(p, inputs={"w": np.zeros(1000, np.float32)})


def test_registered_arrays(s):
    p = s.load(SCALE)
    v = np.arange(1000, dtype=np.float32).reshape(10, 100) * 2
    with s.register(v) as reg:
        r = s.submit(p, binds={"v": reg}, job=5).result(timeout=120)
    # written back into the caller's array, element by element
    want = np.arange(1000, dtype=np.float32).reshape(10, 100) * 6 + 5
    np.testing.assert_array_equal(v, want)
    np.testing.assert_array_equal(r["v"], want)
    # in place, in memory the devices reach
    h = s.host_array((10, 100), np.float32)
    h[:] = 1
    with s.register(h) as reg:
        s.submit(p, binds={"v": reg}).result(timeout=120)
    np.testing.assert_array_equal(h, np.full((10, 100), 3, np.float32))
    with pytest.raises(ValueError, match="bind 'v': float64 of 8000 bytes, the buffer is f32 of 4000 bytes"):
        with s.register(np.zeros(1000)) as bad:
            s.submit(p, binds={"v": bad})


def test_config_error_has_its_place(s):
    with pytest.raises(schedrun.ConfigError) as e:
        s.load("version: 1\nname: x\nbuffers:\n  v: {type: f33, count: 4}\nprogram: []\n", origin="bad.yaml")
    assert e.value.code == -3 and e.value.file == "bad.yaml"
    assert e.value.line == 4 and e.value.column > 0
    assert "f33" in e.value.message


def test_compile_error_carries_the_log(s):
    p = s.load(SCALE.replace("v[i] * by", "v[i] * by +* oops"))
    with pytest.raises(schedrun.CompileError) as e:
        s.submit(p).result(timeout=300)
    assert e.value.code == -4
    assert "oops" in e.value.message or "oops" in e.value.log


def test_verify_error_keeps_the_result(s):
    p = s.load(SCALE + "expect:\n  v: {values: [0, 3, 7]}\n")
    with pytest.raises(schedrun.VerifyError) as e:
        s.submit(p).result(timeout=120)
    r = e.value.result
    assert r is not None and r.status == -5
    assert r["v"].ravel()[2] == 6.0 and "v[0, 2]: expected 7, got 6" in r.error


def test_futures_under_eight_threads(s):
    p = s.load(SCALE)
    errors = []

    def worker(t):
        try:
            for k in range(12):
                v = np.full(1000, t * 100 + k, np.float32)
                r = s.submit(p, inputs={"v": v}, job=k).result(timeout=120)
                np.testing.assert_array_equal(r["v"].ravel(), v * 3 + k)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    futs = s.submit_many(p, [dict(job=j) for j in range(32)])
    done, _ = concurrent.futures.wait(futs, timeout=120)
    assert len(done) == 32 and all(f.result().status == 0 for f in futs)
    calls = []
    futs[0].add_done_callback(lambda f: calls.append(f.result().job))
    assert calls == [0]

    async def both():
        return await asyncio.gather(*[asyncio.wrap_future(s.submit(p, job=j)) for j in range(4)])

    rs = asyncio.run(both())
    assert [r.job for r in rs] == [0, 1, 2, 3]


# the builder tests' kernel: v[i] *= by for i < n
SCALE_KERNEL = ("extern \"C\" __global__ void scale(float *v, float by, int n) {\n"
                "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) v[i] *= by;\n}\n")


def test_builder_mirrors_the_c_one(s):
    v = np.arange(256, dtype=np.float32)
    b = (schedrun.Builder("scale4")
         .kernel("scale", "ptr, f32, i32", SCALE_KERNEL)
         .buffer("v", v)
         .loop(4).launch("scale", grid=1, block=256, args=["v", 2.0, 256]).end())
    p = s.build(b)
    r = s.submit(p).result(timeout=120)
    np.testing.assert_array_equal(r["v"], v * 16)
    with pytest.raises(schedrun.ConfigError, match="kernel 'nope'"):
        s.build(schedrun.Builder("bad").buffer("v", v).launch("nope", 1, 1, ["v"]))


def test_builder_autotuned_launch(tmp_path):
    v = np.arange(1024, dtype=np.float32)
    b = (schedrun.Builder("tuned")
         .kernel("scale", "ptr, f32, i32", SCALE_KERNEL)
         .buffer("v", v)
         .launch_autotune("scale", [128, (256, 1, 1)], "1024 / $block", args=["v", 3.0, 1024], key=["n"]))
    with schedrun.open(devices="host:1", cache_dir=str(tmp_path)) as st:
        r = st.submit(st.build(b)).result(timeout=120)
        np.testing.assert_array_equal(r["v"], v * 3)
        (t,) = st.tunes
        assert t["key"] == "n=1024" and t["timed"] is True
        assert [c for c, _ in t["candidates"]] == [(128, 1, 1), (256, 1, 1)]
        with pytest.raises(schedrun.ConfigError, match="autotune block lists no candidates"):
            st.build(schedrun.Builder("none").buffer("v", v).kernel("scale", "ptr, f32, i32", SCALE_KERNEL)
                     .launch_autotune("scale", [], "1", args=["v", 1.0, 1]))


def test_graph_with_a_python_host_task(s):
    p = s.load(SCALE)
    g = schedrun.Graph()
    a = g.job(p, inputs={"v": np.ones(1000, np.float32)})

    def total(task):
        v = task.array("v", np.float32)
        task.output("sum", np.array([v.sum(dtype=np.float64)]))

    h = g.host("total", total, outputs={"sum": np.float64})
    g.handoff(a, "v", h, "v")
    ra, rh = [f.result(timeout=120) for f in s.submit_graph(g)]
    np.testing.assert_array_equal(ra["v"].ravel(), np.full(1000, 3, np.float32))
    assert rh["sum"][0] == 3000.0


def test_a_host_task_raising_fails_its_job_naming_it(s):
    p = s.load(SCALE)
    g = schedrun.Graph()
    a = g.job(p)

    def broken(task):
        raise RuntimeError("the sensor is unplugged")

    h = g.host("broken", broken)
    after = g.job(p)
    g.after(h, a).after(after, h)
    fa, fh, fafter = s.submit_graph(g)
    assert fa.result(timeout=120).status == 0
    with pytest.raises(schedrun.HostError, match="RuntimeError: the sensor is unplugged"):
        fh.result(timeout=120)
    with pytest.raises(schedrun.DependencyError):
        fafter.result(timeout=120)


def test_run_gives_the_report_and_a_timeline(tmp_path):
    trace = tmp_path / "demo.json"
    with schedrun.open(devices="host:4") as s4:  # the demo's devices
        rep = s4.run(s4.load(os.path.join(CONFIGS, "multi_device_demo.yaml")), trace=str(trace))
    assert rep["verified"] is True and rep["jobs"] == rep["jobs_verified"] == 128
    assert [d["name"] for d in rep["devices"]] == ["host:0", "host:1", "host:2", "host:3"]
    assert all(d["jobs"] > 0 for d in rep["devices"])
    png = tmp_path / "demo.png"
    out = subprocess.run([sys.executable, "-m", "schedrun.timeline", str(trace), "-o", str(png)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000
    bad = subprocess.run([sys.executable, "-m", "schedrun.timeline", str(tmp_path / "none.json")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "none.json" in bad.stderr


def test_closed_scheduler_refuses(tmp_path):
    sched = schedrun.open(devices="host:1")
    p = sched.load(SCALE)
    sched.close()
    with pytest.raises(schedrun.ClosedError):
        sched.submit(p)
    sched.close()  # twice is fine


def test_exit_with_jobs_in_flight():
    code = (
        "import numpy as np, schedrun\n"
        "s = schedrun.open(devices='host:2')\n"
        "p = s.load(%r)\n"
        "fs = s.submit_many(p, [dict(job=j) for j in range(300)])\n"
        "print('submitted', len(fs))\n" % SCALE
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "submitted 300"


TUNED = """version: 1
name: tuned
kernels:
  work:
    params: [ptr, i32]
    source: |
      extern "C" __global__ void work(float *out, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = (float)i;
      }
buffers:
  out: {type: f32, count: 1024}
program:
  - launch:
      kernel: work
      args: [out, 1024]
      autotune: {block: [128, 256], grid: "1024 / $block", key: [n]}
expect:
  out: {at: {0: 0, 1023: 1023}}
"""


def test_autotuned_choices_timed_kept_and_retuned(tmp_path):
    for retune, timed in ((False, True), (False, False), (True, True)):
        with schedrun.open(devices="host:1", cache_dir=str(tmp_path), retune=retune) as st:
            assert st.run(st.load(TUNED))["verified"] is True
            (t,) = st.tunes
            assert t["kernel"] == "work" and t["key"] == "n=1024" and t["timed"] is timed
            assert t["block"] in ((128, 1, 1), (256, 1, 1))
            assert t["grid"] == (1024 // t["block"][0], 1, 1)
            assert [c for c, _ in t["candidates"]] == [(128, 1, 1), (256, 1, 1)]
            assert all(ns > 0 for _, ns in t["candidates"])


def test_placement_by_model_and_its_counts(tmp_path):
    # two host devices, placed by model as asked: every job is counted where it went
    with schedrun.open(devices="host:2", cache_dir=str(tmp_path), placement="model") as s:
        rep = s.run(s.load(os.path.join(CONFIGS, "saxpy.yaml")))
        assert rep["verified"] is True
        placed = s.placement
        assert [p["device"] for p in placed] == ["host:0", "host:1"]
        assert sum(p["placed"] for p in placed) == rep["jobs"]
        assert all(p["by_model"] == p["placed"] for p in placed)
        assert [p["placed"] for p in placed] == [d["jobs"] for d in rep["devices"]]
    with schedrun.open(devices="host:1", cache_dir=str(tmp_path)) as s:
        s.run(s.load(os.path.join(CONFIGS, "saxpy.yaml")))
        assert all(p["by_model"] == 0 for p in s.placement)  # one kind: least-loaded
    with pytest.raises(schedrun.SchedrunError, match="placement 'fastest' is not one of auto, model, least-loaded"):
        schedrun.open(devices="host:1", placement="fastest")


def test_builder_autotuned_constants(tmp_path):
    # each thread scales PER elements: the same result for every value
    kernel = ("extern \"C\" __global__ void scale(float *v, float by, int n) {\n"
              "  int t = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "  for (int e = 0; e < PER; e++) if (t * PER + e < n) v[t * PER + e] *= by;\n}\n")
    v = np.arange(1024, dtype=np.float32)
    b = (schedrun.Builder("per")
         .kernel("scale", "ptr, f32, i32", kernel)
         .buffer("v", v)
         .launch_autotune("scale", [128], "(1024 / $PER + $block - 1) / $block", args=["v", 3.0, 1024],
                          constants={"PER": [1, 2, 4]}))
    with schedrun.open(devices="host:1", cache_dir=str(tmp_path)) as st:
        r = st.submit(st.build(b)).result(timeout=120)
        np.testing.assert_array_equal(r["v"], v * 3)
        (t,) = st.tunes
        assert t["candidate_constants"] == ["PER=1", "PER=2", "PER=4"]
        assert t["constants"] in t["candidate_constants"]
