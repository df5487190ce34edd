"""benchmarks/sampler.py: the ptrace-free sampling profiler names the functions a module
spends its time in, per thread, and writes its report on a normal end and on SIGTERM."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

BUSY = '''
import threading, time

def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

done = threading.Event()

def idle_worker():
    done.wait()     # alive as long as the main thread spins, however slowly it is sampled

if __name__ == "__main__":
    worker = threading.Thread(target=idle_worker, name="idler")
    worker.start()
    spin(0.4)
    done.set()
    worker.join()
'''

SLEEPER = '''
import time

def wait_forever():
    while True:
        time.sleep(0.01)

if __name__ == "__main__":
    wait_forever()
'''


def _start(tmp_path: Path, name: str, source: str, out: Path) -> subprocess.Popen:
    (tmp_path / f"{name}.py").write_text(source)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    return subprocess.Popen([sys.executable, "-m", "benchmarks.sampler", "--out", str(out),
                             "--interval", "0.002", "-m", name], env=env)


def _section(report: str, thread: str) -> str:
    return report.split(f"## {thread}:", 1)[1].split("\n## ", 1)[0]


def test_the_report_names_each_threads_functions(tmp_path):
    out = tmp_path / "profile.txt"
    assert _start(tmp_path, "busy", BUSY, out).wait(timeout=60) == 0
    report = out.read_text()
    main = _section(report, "MainThread")
    spin = [line for line in main.splitlines() if "spin (busy.py:" in line]
    assert spin, report
    inclusive, own = (int(x) for x in spin[0].split()[:2])
    # The main thread spins for most of its life, on top of its stack: most of its samples
    # (a share, not a count: a loaded machine takes fewer samples than one a 2 ms).
    samples = int(report.split("## MainThread: ", 1)[1].split()[0])
    assert samples >= 10 and own >= samples // 2 and inclusive >= own, report
    assert "idle_worker (busy.py:" in _section(report, "idler")
    assert "spin (busy.py:" not in _section(report, "idler")


def test_sigterm_ends_the_module_and_writes_the_report(tmp_path):
    out = tmp_path / "profile.txt"
    proc = _start(tmp_path, "sleeper", SLEEPER, out)
    time.sleep(1.0)
    proc.terminate()
    assert proc.wait(timeout=60) != 0
    assert "wait_forever (sleeper.py:" in _section(out.read_text(), "MainThread")


def test_sigusr1_starts_the_counts_afresh(tmp_path):
    source = '''
import signal, threading, time

def before():
    end = time.perf_counter() + 0.6
    while time.perf_counter() < end:
        pass

def after():
    while True:
        time.sleep(0.01)

if __name__ == "__main__":
    before()
    print("ready", flush=True)
    after()
'''
    out = tmp_path / "profile.txt"
    (tmp_path / "phases.py").write_text(source)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.sampler", "--out", str(out),
                             "--interval", "0.002", "-m", "phases"], env=env,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGUSR1)
    time.sleep(0.5)
    proc.terminate()
    assert proc.wait(timeout=60) != 0
    proc.stdout.close()
    main = _section(out.read_text(), "MainThread")
    assert "after (phases.py:" in main
    assert "before (phases.py:" not in main
