#!/usr/bin/env bash
# One device call that tests and benchmarks the CUDA executor, for the `device` tool.
#
#   bash benchmarks/device_run.sh [STAGE ...]        (from the repository root)
#
# Stages (default: tests gh-dense):
#   tests        every test (the gpu-marked ones run: cuda against cpu and the oracle)
#   pytest       pytest with PYTEST_ARGS (files, -m, -n ...): a chosen set of tests
#   gpu-tests    only the gpu-marked tests (GPU_TESTS_ARGS adds pytest flags, e.g.
#                "--ignore tests/gpu/graph/test_pma.py" when the packed memory array is unchanged);
#                $OUT/gpu-tests.txt names each result as it comes (-v), so a run that a
#                time limit stops still says which tests failed (grep FAILED);
#                GPU_TESTS_ROUNDS=N: N times, stopping at the first round that fails (a
#                failure that comes and goes between runs of one code); GPU_TESTS_PATHS
#                the files or test ids to run instead of all of tests/ (e.g.
#                "tests/gpu/test_batch_groups.py" with GPU_TESTS_ROUNDS=5)
#   service-tests  the service and storage tests with the service on the cuda executor
#                (MOTIFSTREAM_TEST_DEVICE_GRAPH=lists: on the mirrored host lists;
#                SERVICE_TESTS_ROUNDS=N: N times, stopping at the first round that fails)
#   service-bench  benchmarks.service_bench on cuda (SERVICE_ARGS adds flags;
#                SERVICE_BACKEND=cpu runs it on the CPU executor, on the device host's cores;
#                SERVICE_PROFILE=1 writes the server's per-thread profile to
#                $OUT/service-profile.txt, benchmarks/sampler.py: py-spy cannot attach there;
#                SERVICE_SECTIONS=1 each step's wall time per call to
#                $OUT/service-sections.txt, benchmarks/sections.py)
#   apply-profile  benchmarks.apply_profile (the CPU executor on the host's cores; APPLY_ARGS
#                adds flags, e.g. "--queued 1 8 --group-region-edges 4 64"; APPLY_TIMEOUT
#                bounds it, seconds, default 400)
#   region-trace  benchmarks.region_trace (count_phase's region traced piece by piece on
#                the host's cores; REGION_ARGS adds flags, REGION_TIMEOUT bounds it, default 400)
#   profile-Q    benchmarks.phase_profile on cuda for saved query Q (e.g. profile-dense_7)
#   gh-KIND      benchmarks.gh_table on cuda for KIND in dense|sparse|tree, then on cpu
#                for the same queries when GH_CPU=1; GH_ARGS adds flags (e.g.
#                "--max-queries 3"), GH_TIMEOUT bounds each run (seconds, default 300)
#   directed     benchmarks.directed_table (directed GH beside undirected GH) on each backend of
#                DIRECTED_BACKENDS (default "cuda cpu"); DIRECTED_ARGS adds flags (e.g.
#                "--kinds dense --max-queries 3"), DIRECTED_TIMEOUT bounds each run (default 500)
#   timeline     benchmarks.batch_timeline (one batch's host phases, copies, kernels and the
#                GPU's idle time, through PyTorch's profiler); TIMELINE_ARGS adds flags (e.g.
#                "--size 1 --queries 10"), TIMELINE_TIMEOUT bounds it (default 300)
#   pma          the packed-memory-array tests on cupy, then benchmarks.pma_bench (R-MAT;
#                PMA_ARGS adds flags, e.g. "--scale 20 --edges 10000000"; PMA_TIMEOUT
#                bounds it, seconds, default 400)
#   scale        benchmarks.scale_bench on cuda (R-MAT engine load, update throughput,
#                match latency); SCALE_ARGS adds flags, SCALE_TIMEOUT bounds it (default 500)
#   sanitize     compute-sanitizer (SANITIZE_TOOL: initcheck by default, or memcheck, racecheck,
#                synccheck) over the gpu-marked tests of SANITIZE_PATHS (default
#                tests/gpu/test_batch_groups.py; SANITIZE_ARGS adds pytest flags, e.g. -k), with
#                CuPy's memory pool off so that every allocation is fresh memory to the tool (a
#                pool hands back blocks earlier work wrote, which initcheck counts as written);
#                $OUT/sanitize.txt, SANITIZE_TIMEOUT bounds it (default 500)
#   ncu-Q1,Q2    Nsight Compute on the search kernels for saved queries Q1, Q2 (one batch
#                each, benchmarks.kernel_profile --ncu-range); report and details page
#                under $OUT; NCU_ARGS adds flags
#   stream-EXP   benchmarks.stream_bench on cuda for EXP in rate|mixed|latency (e.g.
#                stream-latency), appending to $OUT/stream.jsonl; STREAM_ARGS adds flags
#                (e.g. "--kinds dense --max-queries 3"), STREAM_TIMEOUT bounds each run
#                (seconds, default 300)
# Needs in the tree: .whl/ (wheels: hypothesis, sortedcontainers, and the service's for
# Python 3.12: `bash benchmarks/device_wheels.sh` fetches them),
# bench-out/queries (the saved query sets) and bench-out/data/musae_git_edges.csv
# (carry them: they are git-ignored).  Writes logs and JSON lines under $OUT.
set -u
OUT=${OUT:-bench-out/device}
mkdir -p "$OUT"
export PYTHONPATH=$PWD
# The oracle tests' extras, and the service's packages (the device has no fastapi; every
# stage collects tests/service).
python3 -m pip install -q --no-index --find-links .whl hypothesis sortedcontainers fastapi \
    'uvicorn[standard]' pydantic pydantic-settings prometheus-client orjson httpx2 websockets \
    asgi-correlation-id python-json-logger prometheus-fastapi-instrumentator fastapi-offline python-multipart 2>&1 \
    | tail -2
# pyarrow (the arrow extra: Arrow IPC batch bodies) only when its wheel came: at 55 MB it
# does not fit the device tool's 64 MiB carry beside the others, and its tests skip without.
if ls .whl/pyarrow-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --find-links .whl pyarrow 2>&1 | tail -2
fi
# pytest-xdist (with execnet) runs the tests on every core when its wheels are in .whl
# (tests/conftest.py); without them the tests run in one process.  The image's
# pytest-benchmark warns under xdist (an error here): every pytest run has -p no:benchmark.
if ls .whl/pytest_xdist-*.whl .whl/execnet-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --find-links .whl pytest-xdist 2>&1 | tail -2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
GRAPH=bench-out/data/musae_git_edges.csv
[ -f "$GRAPH" ] || GRAPH=../shared/datasets/github/musae_git_edges.csv
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(tests gh-dense)
status=0
for stage in "${stages[@]}"; do
    echo "=== $stage"
    case "$stage" in
        tests)
            python3 -m pytest -q -p no:cacheprovider -p no:benchmark -rs 2>&1 | tee "$OUT/tests.txt" | tail -25
            [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
        pytest)
            python3 -m pytest -q -p no:cacheprovider -p no:benchmark ${PYTEST_ARGS:-} 2>&1 \
                | tee "$OUT/pytest.txt" | tail -15
            [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
        gpu-tests)
            for round in $(seq "${GPU_TESTS_ROUNDS:-1}"); do
                python3 -m pytest -v -rfE -p no:cacheprovider -p no:benchmark -m gpu ${GPU_TESTS_ARGS:-} ${GPU_TESTS_PATHS:-tests} 2>&1 \
                    | tee "$OUT/gpu-tests.txt" \
                    | grep -v " PASSED \| SKIPPED " | tail -25
                [ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; echo "failed in round $round"; break; }
            done ;;
        service-tests)
            # SERVICE_TESTS_ROUNDS runs them again (a fault that hits one start in hundreds);
            # the first round that fails stops the stage, its log kept.
            for round in $(seq "${SERVICE_TESTS_ROUNDS:-1}"); do
                MOTIFSTREAM_TEST_BACKEND=cuda python3 -m pytest -q -p no:cacheprovider \
                    -p no:benchmark tests/service tests/storage 2>&1 \
                    | tee "$OUT/service-tests.txt" | tail -15
                [ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; echo "failed in round $round"; break; }
            done ;;
        service-bench)
            python3 -m benchmarks.service_bench --graph "$GRAPH" --backend "${SERVICE_BACKEND:-cuda}" \
                --json "$OUT/service-bench.jsonl" ${SERVICE_PROFILE:+--profile "$OUT/service-profile.txt"} \
                ${SERVICE_SECTIONS:+--sections "$OUT/service-sections.txt"} \
                ${SERVICE_ARGS:-} 2>&1 \
                | tee "$OUT/service-bench.txt" | tail -20 ;;
        apply-profile)
            timeout "${APPLY_TIMEOUT:-400}" python3 -m benchmarks.apply_profile --graph "$GRAPH" \
                ${APPLY_ARGS:-} 2>&1 | tee -a "$OUT/apply-profile.txt" | tail -30
            [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
        region-trace)
            timeout "${REGION_TIMEOUT:-400}" python3 -m benchmarks.region_trace --graph "$GRAPH" \
                ${REGION_ARGS:-} 2>&1 | tee -a "$OUT/region-trace.txt" | tail -60
            [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
        profile-*)
            query=bench-out/queries/gh_k6_seed0_labels5x0/${stage#profile-}.graph
            python3 -m benchmarks.phase_profile "$query" --graph "$GRAPH" --backend cuda \
                --top 25 2>&1 | tee "$OUT/$stage.txt" | head -60 ;;
        sanitize)
            timeout "${SANITIZE_TIMEOUT:-500}" compute-sanitizer --tool "${SANITIZE_TOOL:-initcheck}" \
                --target-processes all --error-exitcode 9 \
                python3 -c "import sys, cupy, pytest; cupy.cuda.set_allocator(None); sys.exit(pytest.main(sys.argv[1:]))" \
                -v -rfE -p no:cacheprovider -p no:benchmark -m gpu ${SANITIZE_ARGS:-} \
                ${SANITIZE_PATHS:-tests/gpu/test_batch_groups.py} 2>&1 \
                | tee "$OUT/sanitize.txt" | grep -v " PASSED \| SKIPPED " | tail -40
            [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
        ncu-*)
            # Nsight Compute on the search kernels of the named queries (comma-separated),
            # the sections that located its stalls (2026-11-29); NCU_ARGS adds flags.
            queries=${stage#ncu-}
            ncu --clock-control none --profile-from-start off --kernel-name regex:match_tasks \
                --section SpeedOfLight --section Occupancy --section LaunchStats \
                --section WarpStateStats --section SchedulerStats \
                --section MemoryWorkloadAnalysis --section SourceCounters ${NCU_ARGS:-} \
                -o "$OUT/$stage" python3 -m benchmarks.kernel_profile --graph "$GRAPH" \
                --ncu-range ${queries//,/ } 2>&1 | tail -8
            ncu -i "$OUT/$stage.ncu-rep" --page details > "$OUT/$stage.txt" 2>&1
            grep -E "match_tasks|Duration|No Eligible|Spilling Requests|Achieved Occupancy" \
                "$OUT/$stage.txt" ;;
        directed)
            for backend in ${DIRECTED_BACKENDS:-cuda cpu}; do
                timeout "${DIRECTED_TIMEOUT:-500}" python3 -m benchmarks.directed_table \
                    --graph "$GRAPH" --backend "$backend" --json "$OUT/directed-$backend.jsonl" \
                    ${DIRECTED_ARGS:-} 2>&1 | tee -a "$OUT/directed-$backend.txt" | tail -16
                [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
            done ;;
        gh-*)
            kind=${stage#gh-}
            for backend in cuda ${GH_CPU:+cpu}; do
                timeout "${GH_TIMEOUT:-300}" python3 -m benchmarks.gh_table --graph "$GRAPH" \
                    --backend "$backend" --kinds "$kind" --json "$OUT/gh-$backend.jsonl" \
                    ${GH_ARGS:-} 2>&1 | tee -a "$OUT/gh-$backend.txt" | tail -12
            done ;;
        timeline)
            timeout "${TIMELINE_TIMEOUT:-300}" python3 -m benchmarks.batch_timeline --graph "$GRAPH" \
                --json "$OUT/timeline.jsonl" ${TIMELINE_ARGS:-} 2>&1 | tee -a "$OUT/timeline.txt" | tail -60
            [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
        pma)
            python3 -m pytest -q -p no:cacheprovider -p no:benchmark -m gpu tests/gpu/graph/test_pma.py 2>&1 \
                | tee "$OUT/pma-tests.txt" | tail -5
            [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
            timeout "${PMA_TIMEOUT:-400}" python3 -m benchmarks.pma_bench --check \
                --json "$OUT/pma.jsonl" ${PMA_ARGS:-} 2>&1 | tee -a "$OUT/pma.txt" | tail -30
            [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
        scale)
            timeout "${SCALE_TIMEOUT:-500}" python3 -m benchmarks.scale_bench --backend cuda \
                --json "$OUT/scale.jsonl" ${SCALE_ARGS:-} 2>&1 | tee -a "$OUT/scale.txt" | tail -20
            [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
        stream-*)
            timeout "${STREAM_TIMEOUT:-300}" python3 -m benchmarks.stream_bench --graph "$GRAPH" \
                --backend cuda --experiments "${stage#stream-}" --json "$OUT/stream.jsonl" \
                ${STREAM_ARGS:-} 2>&1 | tee -a "$OUT/stream.txt" | tail -20
            # A failed --check, a bad option or the timeout.
            [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
        *) echo "unknown stage $stage"; status=2 ;;
    esac
done
exit $status
