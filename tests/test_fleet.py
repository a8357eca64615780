"""``vkcap suite run --ray``: a suite on a Ray cluster, here a local two-node one (two ``ray start``
processes on this machine, both lavapipe, told apart by their ``vkcap_node`` resource), judged and
reported as the in-process suite is; an actor killed and a node lost mid-suite cost no trace.

The actors run with the driver's ``VKCAP_*`` environment, so they replay under the validation layer and
log into the running test's validation log like any ``vkcap`` child (see conftest)."""
from __future__ import annotations

import pytest

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from tests.builders import ScenarioBuilder, vkcap
from tests.test_suite import record

RAY = Path(sys.executable).parent / "ray"
# the head notices a lost node within a second or two (Ray's default: 30 s)
FAST_HEALTH_CHECKS = {"RAY_health_check_initial_delay_ms": "0", "RAY_health_check_period_ms": "500",
                      "RAY_health_check_timeout_ms": "500", "RAY_health_check_failure_threshold": "3"}
COMPARED = ("trace", "device", "driver", "status", "outcome", "expected", "frames", "first_divergence", "detail", "attempts")


class Cluster:
    """Nodes started with ``ray start --block`` on this machine; ``env``: what a driver needs besides the
    address (the cluster's token: its nodes and drivers share one of their own)."""

    def __init__(self, folder: Path, traces: Path) -> None:
        self.folder, self.traces = folder, traces
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}
        self.address = ""
        self.env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}

    def start(self, name: str, resources: dict[str, int]) -> None:
        """``ray start --block``: the node's processes live as long as this one (ended in teardown)."""
        # TMPDIR: the second node's session and the actors' folders go with the head's into the cluster's folder
        env = {**os.environ, **self.env, "RAY_USAGE_STATS_ENABLED": "0", "TMPDIR": str(self.folder), **FAST_HEALTH_CHECKS}
        common = ["--block", "--num-cpus=1", "--object-store-memory=100000000", f"--resources={json.dumps(resources)}"]
        where = ["--head", "--port=0", "--include-dashboard=false", f"--temp-dir={self.folder}"] if not self.address \
            else [f"--address={self.address}"]
        log = open(self.folder / f"{name}.log", "wb")  # noqa: SIM115 (the node's own output, read on failure)
        self.nodes[name] = subprocess.Popen([str(RAY), "start", *where, *common], stdout=log, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True)

    def wait(self, name: str) -> None:
        deadline = time.monotonic() + 90
        log = self.folder / f"{name}.log"
        while "Ray runtime started" not in log.read_text(errors="replace"):
            assert self.nodes[name].poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        if not self.address:
            self.address = (self.folder / "ray_current_cluster").read_text().strip()

    def kill(self, name: str) -> None:
        """SIGKILL to every process of a node (its ``ray start`` leads their session; Ray's workers have
        process groups of their own): the machine is gone."""
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                session = int(stat.read_text().rsplit(")", 1)[1].split()[3])
                if session == self.nodes[name].pid:
                    os.kill(int(stat.parent.name), signal.SIGKILL)
            except (OSError, IndexError, ValueError):
                continue
        self.nodes[name].wait()

    def stop(self) -> None:
        for node in reversed(self.nodes.values()):
            if node.poll() is None:
                node.terminate()  # ray start --block stops its node's processes
        for node in self.nodes.values():
            try:
                node.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill(next(n for n, p in self.nodes.items() if p is node))


@contextlib.contextmanager
def two_nodes(tmp: Path) -> Iterator[Cluster]:
    """A head node (``vkcap_node:head``) and a second one (``vkcap_node:second``), each advertising this
    machine's lavapipe as ``vkcap fleet resources`` prints it; and, recorded while they start, 12 traces
    in ``tmp/traces``: 10 of 2 frames, 2 of 4."""
    assert RAY.exists(), "Ray is not installed: pip install -e '.[test,ray]' (make setup does)"
    folder = Path(tempfile.mkdtemp(prefix="vkray-"))  # short: Ray's sockets live there (108-byte paths)
    resources = {}
    for name in ("head", "second"):
        proc = vkcap("fleet", "resources", "--name", name)
        assert proc.returncode == 0, proc.stderr
        resources[name] = json.loads(proc.stdout)
    # this machine's one lavapipe, its driver, its UUID, the node's name: {"vkcap_node:head": 1,
    # "vulkan_device:llvmpipe_LLVM_15.0.6_256_bits": 1, "vulkan_driver:Mesa_22.3.6_LLVM_15.0.6": 1,
    # "vulkan_gpu:6d657361...:llvmpipe_LLVM_15.0.6_256_bits": 1}
    assert sorted(k.split(":")[0] for k in resources["head"]) == ["vkcap_node", "vulkan_device", "vulkan_driver", "vulkan_gpu"]
    assert resources["head"]["vkcap_node:head"] == 1 and any(k.startswith("vulkan_device:llvmpipe_LLVM_") for k in
                                                              resources["head"]), resources
    cluster = Cluster(folder, tmp / "traces")
    try:
        cluster.start("head", resources["head"])
        builder = ScenarioBuilder(tmp / "scenario")
        for k in range(10):
            record(builder, tmp, 2, f"t{k:02}")
        for name in ("crash_expected", "crash_unexpected"):
            record(builder, tmp, 4, name)
        cluster.wait("head")
        cluster.start("second", resources["second"])
        cluster.wait("second")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


def rows(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text())["results"]


@pytest.mark.device
def test_a_two_node_fleet(tmp_path: Path) -> None:
    """Three suites on one two-node cluster: split across both nodes as in-process; an actor killed; the
    second node lost. (One test, one cluster: pytest-xdist deals out tests, not modules, and its
    ``loadgroup`` does not group under pytest 9; a cluster per worker would cost each 10 s of CPU.)"""
    with two_nodes(tmp_path) as cluster:
        split_across_both(cluster, tmp_path / "split")
        actor_killed(cluster, tmp_path / "killed")
        node_lost(cluster, tmp_path / "lost")


def split_across_both(cluster: Cluster, tmp: Path) -> None:
    """12 traces (one crash expected, one not: the fault injection's SIGSEGV in frame 2) on the two nodes'
    actors: the same results as the in-process suite's (statuses, outcomes, frames, the crash's frame and
    signal), each naming the node it ran on, both nodes used; the result files and pages are written
    here as without Ray, and merge as a suite's."""
    manifest = cluster.traces / "suite.toml"
    manifest.write_text('[[traces]]\npath = "t*.vkt"\n\n[[traces]]\npath = "crash_expected.vkt"\n[[traces.expect]]\n'
                        'device = "*"\nstatus = "crash"\nframe = 2\nreason = "dies in frame 2"\n\n'
                        '[[traces]]\npath = "crash_unexpected.vkt"\n')
    crash = {"VKCAP_TEST_CRASH_AT_FRAME": "2"}
    here = vkcap("suite", "run", manifest, "-j", "2", "--json", tmp / "here.json", env=crash)
    assert here.returncode == 1, here.stderr
    fleet = vkcap("suite", "run", manifest, "--ray", cluster.address, "--json", tmp / "fleet.json",
                  "--results", tmp / "results", "--html", tmp / "fleet.html", env={**cluster.env, **crash})
    assert fleet.returncode == 1, fleet.stderr
    expected, got = rows(tmp / "here.json"), rows(tmp / "fleet.json")
    assert [{k: r[k] for k in COMPARED} for r in got] == [{k: r[k] for k in COMPARED} for r in expected]
    assert len(got) == 12 and {r["host"] for r in got} == {"head", "second"} and {r["host"] for r in expected} == {""}
    assert {len(r["device_uuid"]) for r in got + expected} == {32}  # the exact device, here and on the fleet
    by_name = {Path(r["trace"]).name: r for r in got}
    assert (by_name["crash_unexpected.vkt"]["status"], by_name["crash_unexpected.vkt"]["detail"]) == \
        ("fail", "the replay died in frame 2: SIGSEGV")
    assert by_name["crash_expected.vkt"]["status"] == "expected"
    assert "suite: 10 pass, 1 expected, 1 fail" in fleet.stderr, fleet.stderr
    assert "host" in fleet.stdout and "second" in fleet.stdout  # the table names the nodes
    assert len(list((tmp / "results").glob("*.json"))) == 12
    assert len(list((tmp / "results").glob("*.html"))) == 10  # each replay's page, not the crashes'
    merged = vkcap("suite", "merge", tmp / "results", "--json", tmp / "merged.json")
    assert merged.returncode == 1 and [{k: r[k] for k in (*COMPARED, "host")} for r in rows(tmp / "merged.json")] == \
        [{k: r[k] for k in (*COMPARED, "host")} for r in got]
    # the traces reached the nodes through the object store, each kept once in the nodes' cache by its content
    import xxhash

    cached = {p.parent.name for p in (Path(os.environ["VKCAP_CACHE_DIR"]) / "fleet").glob("*/*.vkt")}
    assert cached == {xxhash.xxh3_128(p.read_bytes()).hexdigest() for p in cluster.traces.glob("*.vkt")}
    # a pattern no device of the fleet matches: one line, exit 2
    none = vkcap("suite", "run", manifest, "--ray", cluster.address, "--device", "NVIDIA*", env=cluster.env)
    assert none.returncode == 2 and none.stderr.strip().startswith(
        f"vkcap: error: --ray {cluster.address}: no node advertises a Vulkan device matching --device NVIDIA* "
        "(vulkan_device:NAME resources); the fleet has: llvmpipe"), none.stderr


def _actor_replaying() -> int | None:
    """The pid of a fleet actor busy replaying (Ray titles the process by the method it runs)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes().startswith(b"ray::DeviceActor.replay"):
                return int(cmdline.parent.name)
        except OSError:
            continue
    return None


def _run_and(cluster: Cluster, then: Any, *args: str | Path) -> tuple[int, str, str]:
    """``vkcap suite run`` of the 12 traces (their folder: each expected to pass) on the cluster; ``then()``
    once its actors have started (the first replays are on their way: each actor's first one, which makes
    its pipelines, takes the longest)."""
    proc = subprocess.Popen([sys.executable, "-m", "vkcap", "suite", "run", str(cluster.traces),
                             *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **cluster.env, "RAY_ADDRESS": cluster.address})
    assert proc.stderr is not None and proc.stdout is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "fleet: 2 actor(s)" in line:
            then()
            break
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, "".join(seen) + err


def actor_killed(cluster: Cluster, tmp: Path) -> None:
    """An actor's process killed (SIGKILL: no fatal signal of a driver) while it replays: its trace is
    rescheduled, the actor replaced, and every trace is reported, passing (``--ray auto``: the cluster
    of RAY_ADDRESS)."""
    def kill() -> None:
        deadline = time.monotonic() + 30
        while (pid := _actor_replaying()) is None:
            assert time.monotonic() < deadline, "no actor replaying"
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)

    code, out, err = _run_and(cluster, kill, "--ray", "auto", "--json", tmp / "r.json")
    assert code == 0, err
    results = rows(tmp / "r.json")
    assert [Path(r["trace"]).name for r in results] == sorted(p.name for p in cluster.traces.glob("*.vkt"))
    assert {r["status"] for r in results} == {"pass"}
    again = [r for r in results if "replayed again after it was lost on" in r["detail"]]
    assert len(again) == 1 and re.fullmatch(r"replayed again after it was lost on (head|second) \(its actor ended without "
                                            r"a fatal signal: killed, or out of memory\)", again[0]["detail"]), results
    assert "rescheduled" in err and "worker died" not in out  # Ray's own messages stay off the table


def node_lost(cluster: Cluster, tmp: Path) -> None:
    """The second node's processes all killed mid-suite (a machine gone): the trace its actor was
    replaying is rescheduled on the head, which replays the rest; every trace is reported (``--ray-shared``:
    the actors read the traces where they are)."""
    code, out, err = _run_and(cluster, lambda: cluster.kill("second"), "--ray", cluster.address, "--ray-shared",
                              "--json", tmp / "r.json")
    assert code == 0, err
    results = rows(tmp / "r.json")
    assert len(results) == 12 and {r["status"] for r in results} == {"pass"}, results
    again = [r for r in results if r["detail"] == "replayed again after it was lost on second (node lost)"]
    assert len(again) == 1 and again[0]["host"] == "head", err + json.dumps(results, indent=1)


@pytest.mark.slow
def test_bad_input_is_one_line(tmp_path: Path) -> None:
    """Without Ray installed, with an address no cluster answers at, or with options --ray cannot honour:
    one line, exit 2, before any replay."""
    (tmp_path / "t.vkt").write_bytes(b"")
    no_ray = subprocess.run([sys.executable, "-c", "import sys; sys.modules['ray'] = None; from vkcap.cli import main; "
                             f"sys.exit(main(['suite', 'run', {str(tmp_path)!r}, '--ray', 'local']))"],
                            capture_output=True, text=True, timeout=60)
    assert (no_ray.returncode, no_ray.stderr.strip()) == (
        2, "vkcap: error: --ray needs Ray, an optional dependency: pip install 'vkcap[ray]'")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cases = {
        (f"127.0.0.1:{port}",): f"--ray 127.0.0.1:{port}: no Ray cluster answers there (Connection refused)",
        ("nowhere",): "--ray nowhere: expected local, auto, HOST:PORT or ray://HOST:PORT",
        ("local", "-j", "2"): "-j: --ray replays with one actor per Vulkan device of each node (no worker processes)",
        ("auto",): "--ray auto: joins the cluster in RAY_ADDRESS, which is not set",
    }
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    for args, message in cases.items():
        proc = subprocess.run([sys.executable, "-m", "vkcap", "suite", "run", str(tmp_path), "--ray", *args],
                              capture_output=True, text=True, timeout=60, env=env)
        assert (proc.returncode, proc.stderr.strip()) == (2, f"vkcap: error: {message}"), args
    shared = vkcap("suite", "run", tmp_path, "--ray-shared")
    assert (shared.returncode, shared.stderr.strip()) == (2, "vkcap: error: --ray-shared: only with --ray")


@pytest.mark.slow
@pytest.mark.device
def test_a_local_cluster_in_this_process(tmp_path: Path) -> None:
    """``--ray local``: a cluster started in the vkcap process, advertising this machine's devices; with
    ``--ray-shared`` the actor reads the traces where they are."""
    golden = Path(__file__).resolve().parent.parent / "traces"
    for name in ("add.vkt", "conv2d.vkt"):
        (tmp_path / "traces").mkdir(exist_ok=True)
        (tmp_path / "traces" / name).write_bytes((golden / name).read_bytes())
    folder = tempfile.mkdtemp(prefix="vkray-")  # the cluster's session and the actor's folder (short: Ray's sockets)
    try:
        proc = vkcap("suite", "run", tmp_path / "traces", "--ray", "local", "--ray-shared", "--json", tmp_path / "r.json",
                     env={"RAY_ADDRESS": "", "TMPDIR": folder})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    assert [(Path(r["trace"]).name, r["status"], r["frames"], r["host"]) for r in rows(tmp_path / "r.json")] == [
        ("add.vkt", "pass", 4, socket.gethostname()), ("conv2d.vkt", "pass", 1, socket.gethostname())]


class Scripted:
    """An actor's proxy without Ray (what :func:`replay.fleet.share` schedules): ``answer(trace)`` gives
    each replay's report, or the :class:`replay.fleet.Lost` it raises."""

    def __init__(self, node: str, device: str, answer: Any, delay: float = 0.0) -> None:
        from replay.fleet import _Place

        self.place, self.host, self.device, self.driver = _Place(node, node, "dev", 0), node, device, "1.0"
        self.answer, self.delay = answer, delay

    def start(self) -> str:
        return self.device

    def replay(self, trace: Path, flags: tuple[str, ...] = (), pages: Path | None = None) -> dict[str, Any]:
        time.sleep(self.delay)
        said = self.answer(trace)
        if isinstance(said, Exception):
            raise said
        return {"outcome": "identical", "device": self.device, "frames": 2}


def test_lost_traces_are_rescheduled_once_then_crash_naming_the_nodes(tmp_path: Path) -> None:
    """The scheduling alone (no Ray): a trace lost on one node is replayed on another, and says so; lost
    on both, it is a crash naming both; when a device has no actor left, its remaining traces are crashes
    naming the lost nodes. Every trace gets a result for every device, in order."""
    from replay.fleet import Lost, share
    from replay.suite import SuiteTrace

    traces = [SuiteTrace(tmp_path / f"t{k}.vkt") for k in range(6)]
    killed = Lost("a", "killed", gone=False)
    # node a loses everything it takes; node b replays; node c has another device
    proxies: list[Any] = [Scripted("a", "gpu", lambda t: killed), Scripted("b", "gpu", lambda t: None, 0.01),
                          Scripted("c", "other", lambda t: None)]
    results = share(traces, proxies)
    assert [(Path(r.trace).name, r.device) for r in results] == [(f"t{k}.vkt", d) for k in range(6) for d in ("gpu", "other")]
    assert {(r.status, r.host) for r in results} == {("pass", "b"), ("pass", "c")}
    notes = [r.detail for r in results if r.detail]
    assert notes and set(notes) == {"replayed again after it was lost on a (killed)"}
    # lost on both nodes: a crash naming them
    proxies = [Scripted(n, "gpu", lambda t, n=n: Lost(n, "killed", gone=False)) for n in "ab"]
    results = share(traces, proxies)
    assert {(r.status, r.outcome) for r in results} == {("fail", "crash")}
    assert all(re.fullmatch(r"lost twice, on (a|b) \(killed\), then on (a|b) \(killed\)", r.detail) for r in results)
    # both nodes gone (b after one replay): nobody left for the rest
    seen: list[Path] = []

    def b_then_gone(trace: Path) -> Lost | None:
        seen.append(trace)
        return None if len(seen) == 1 else Lost("b", "node lost", gone=True)

    proxies = [Scripted("a", "gpu", lambda t: Lost("a", "node lost", gone=True)), Scripted("b", "gpu", b_then_gone, 0.01)]
    results = share(traces, proxies)
    assert len(results) == 6 and sum(r.status == "pass" for r in results) == 1
    crashes = [r for r in results if r.status != "pass"]
    assert {(r.status, r.outcome) for r in crashes} == {("fail", "crash")}
    assert all(r.detail.startswith(("not replayed: no actor left for its device after losing ", "lost twice, on "))
               for r in crashes), [r.detail for r in crashes]
    assert any("b (node lost)" in r.detail for r in crashes)


def test_each_gpu_is_a_resource_and_an_actor_is_pinned_to_one() -> None:
    """Without Ray: a node advertises each device's UUID (``vulkan_gpu:UUID:NAME``) beside the counts,
    and the fleet makes one place per GPU, pinned by its UUID; devices reporting the same UUID (one ICD
    listed twice) stay apart by their ordinal, and a node without UUIDs falls back to ordinals."""
    from dataclasses import dataclass as data

    from replay.fleet import Fleet, _Place
    from replay.fleet_node import node_resources

    @data
    class Device:
        name: str
        device_uuid: str

        def fingerprint(self) -> dict[str, Any]:
            return {"driver_name": "NVIDIA", "driver_info": "580.159.04"}

    h200s = [Device("NVIDIA H200", "aa" * 16), Device("NVIDIA H200", "bb" * 16)]
    advertised = node_resources(h200s, "gpu-01")
    assert advertised == {"vkcap_node:gpu-01": 1, "vulkan_device:NVIDIA_H200": 2, "vulkan_driver:580.159.04": 2,
                          f"vulkan_gpu:{'aa' * 16}:NVIDIA_H200": 1, f"vulkan_gpu:{'bb' * 16}:NVIDIA_H200": 1}
    twins = node_resources([Device("llvmpipe", "cc" * 16)] * 2)
    legacy = {"vulkan_device:llvmpipe": 2}

    class Ray:
        @staticmethod
        def nodes() -> list[dict[str, Any]]:
            return [{"Alive": True, "NodeID": f"n{k}", "NodeManagerHostname": f"h{k}", "Resources": r}
                    for k, r in enumerate([advertised, twins, legacy])]

    fleet = object.__new__(Fleet)
    fleet.ray, fleet.options = Ray, type("Options", (), {"devices": (), "address": "local"})()
    assert fleet._places() == [
        _Place("n0", "gpu-01", "NVIDIA_H200", 0, "aa" * 16), _Place("n0", "gpu-01", "NVIDIA_H200", 0, "bb" * 16),
        _Place("n1", "h1", "llvmpipe", 0, "cc" * 16), _Place("n1", "h1", "llvmpipe", 1, "cc" * 16),
        _Place("n2", "h2", "llvmpipe", 0), _Place("n2", "h2", "llvmpipe", 1)]
