"""Checks of the deployment files that need no Docker: docker-compose.yml (profiles, the
address the port is published on, the build arguments), .dockerignore (what the build context
keeps and leaves out, with Docker's matching rules) and deploy/Dockerfile (stages, the order of
dependencies and source)."""
from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DOCKERFILE = (ROOT / "deploy" / "Dockerfile").read_text()
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
    "optional-dependencies"]


def with_defaults(text: str) -> str:
    """Compose's `${VAR:-default}` interpolation with no variable set."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", text)


# ---- docker-compose.yml ------------------------------------------------------------------
def test_every_service_is_in_one_profile_gpu_or_cpu():
    profiles = {name: service.get("profiles") for name, service in COMPOSE["services"].items()}
    assert sorted(profiles.values()) == [["cpu"], ["gpu"]], profiles


def test_the_port_is_published_on_loopback_by_default():
    for name, service in COMPOSE["services"].items():
        for port in service["ports"]:
            host, published, target = with_defaults(port).split(":")
            assert (host, published, target) == ("127.0.0.1", "8080", "8080"), (name, port)


def _service(profile: str) -> dict:
    (service,) = [s for s in COMPOSE["services"].values() if s["profiles"] == [profile]]
    return service


def test_the_gpu_profile_reserves_a_gpu_and_installs_cupy():
    service = _service("gpu")
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    args = service["build"]["args"]
    assert args["BASE_IMAGE"].startswith("nvidia/cuda:12")
    assert any(dep.startswith("cupy-cuda12x") for dep in EXTRAS[args["EXTRAS"]])


def test_the_cpu_profile_has_no_cuda_and_no_cupy():
    service = _service("cpu")
    assert "deploy" not in service
    args = service["build"]["args"]
    assert "cuda" not in args["BASE_IMAGE"] and args["EXTRAS"] == ""


def test_both_profiles_build_the_dockerfile_and_keep_state_on_the_volume():
    for service in COMPOSE["services"].values():
        assert (ROOT / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
        assert service["volumes"] == ["motifstream-data:/data"]
        assert service["healthcheck"]["test"][-1].endswith(
            "urlopen('http://127.0.0.1:8080/readyz', timeout=2)")
    assert "motifstream-data" in COMPOSE["volumes"]


def test_cupy_extras_for_cuda_12_and_13():
    assert [dep.split(">")[0] for dep in EXTRAS["cuda"]] == ["cupy-cuda12x"]
    assert [dep.split(">")[0] for dep in EXTRAS["cuda13"]] == ["cupy-cuda13x"]


# ---- .dockerignore -------------------------------------------------------------------------
def _pattern(pattern: str) -> re.Pattern:
    """A .dockerignore pattern as a regex (Go's filepath.Match plus `**`, as Docker)."""
    out, i = "", 0
    pattern = pattern.strip("/")
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i:end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


RULES = [(line.startswith("!"), _pattern(line.removeprefix("!")))
         for line in (ROOT / ".dockerignore").read_text().splitlines()
         if line.strip() and not line.startswith("#")]


def ignored(path: str) -> bool:
    """Whether Docker leaves `path` out of the build context: the last rule that matches the
    path or one of its parent directories decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for negated, rule in RULES:
        if any(rule.fullmatch(prefix) for prefix in prefixes):
            excluded = not negated
    return excluded


@pytest.mark.parametrize("path", [
    ".git/HEAD", ".git/objects/ab/cdef", ".venv/bin/python", ".venv-ci/lib/site.py",
    "service/__pycache__/main.cpython-312.pyc", "gpu/cuda/__pycache__/x.pyc",
    "storage/store.pyc", "tests/service/test_events.py", "benchmarks/gh_table.py",
    "motifstream-data/store.db", ".pytest_cache/v/cache", "docs/service.md",
])
def test_the_build_context_leaves_out(path):
    assert ignored(path)


@pytest.mark.parametrize("path", [
    "pyproject.toml", "README.md", "service/main.py", "service/demo/graph.txt",
    "gpu/cuda/kernels/match.cu", "storage/store.py",
])
def test_the_build_context_keeps(path):
    assert not ignored(path)


def test_every_tracked_file_the_package_needs_is_in_the_context():
    tracked = subprocess.run(["git", "ls-files", "gpu", "service", "storage"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    assert tracked and [path for path in tracked if ignored(path)] == []


# ---- deploy/Dockerfile ----------------------------------------------------------------------
def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE)
    return [(line.split()[0].upper(), line.split(None, 1)[1])
            for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_dependencies_install_before_the_source_is_copied():
    steps = instructions()
    build = steps.index(("FROM", "base AS build"))
    runtime = steps.index(("FROM", "base AS runtime"))
    stage = steps[build:runtime]
    copies = [args for op, args in stage if op == "COPY"]
    assert copies[0] == "pyproject.toml ./"
    requirements = next(i for i, (op, args) in enumerate(stage)
                        if op == "RUN" and "-r /tmp/requirements.txt" in args)
    first_source = next(i for i, (op, args) in enumerate(stage)
                        if op == "COPY" and args.split()[0] in ("gpu", "service", "storage"))
    assert requirements < first_source
    assert ("RUN", "pip install --no-cache-dir --no-deps .") in stage[first_source:]


def test_the_runtime_stage_copies_the_environment_and_has_no_compiler():
    steps = instructions()
    runtime = steps[steps.index(("FROM", "base AS runtime")):]
    assert ("COPY", "--from=build /opt/motifstream /opt/motifstream") in runtime
    assert not any("gcc" in args for _, args in runtime)
    assert not any(op == "COPY" and "--from" not in args for op, args in runtime)
    assert ("USER", "motifstream") in runtime


def test_every_path_the_dockerfile_copies_is_in_the_context():
    sources = [args.split()[:-1] for op, args in instructions()
               if op == "COPY" and "--from" not in args]
    for path in (p for group in sources for p in group):
        assert (ROOT / path).exists() and not ignored(path), path


def test_the_default_extra_exists():
    (default,) = re.findall(r"^ARG EXTRAS=(\S*)$", DOCKERFILE, re.M)
    assert default in EXTRAS


def test_compiled_kernels_are_kept_on_the_data_volume():
    """Only the first start of a deployment compiles (docs/service.md, First start): Numba's
    and CuPy's caches are on the volume that outlives containers, where the unprivileged
    user may write."""
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(
        args for op, args in instructions() if op == "ENV")))
    volume_path = _service("cpu")["volumes"][0].split(":")[1]
    assert env["MOTIFSTREAM_DATA_DIR"] == volume_path
    for cache in ("NUMBA_CACHE_DIR", "CUPY_CACHE_DIR"):
        assert env[cache].startswith(volume_path + "/"), cache
    steps = instructions()
    runtime = steps[steps.index(("FROM", "base AS runtime")):]
    assert any(op == "RUN" and f"chown motifstream {volume_path}" in args
               for op, args in runtime)
    # The image compiles them into the cache as the unprivileged user, before VOLUME
    # (a build step after it could not write to the volume's path).
    compile_step = runtime.index(("RUN", "python3 -m gpu.compile_ahead"))
    assert runtime.index(("USER", "motifstream")) < compile_step
    assert compile_step < next(i for i, (op, _) in enumerate(runtime) if op == "VOLUME")
    assert next(i for i, (op, args) in enumerate(runtime)
                if op == "ENV" and "NUMBA_CACHE_DIR" in args) < compile_step
