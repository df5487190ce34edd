#!/usr/bin/env bash
# Fetch into .whl/ the wheels benchmarks/device_run.sh installs on the device, whose Python
# (3.12) has NumPy, Numba, CuPy, pytest and httpx but not the service's packages.
#
#   bash benchmarks/device_wheels.sh [PYTHON]       (from the repository root; PYTHON: the
#                                                    project's venv python, default .venv's)
#
# Each package at the version installed here (so the device runs what the tests ran on this
# machine), for CPython 3.12 on manylinux x86_64, without its dependencies (the ones the
# device lacks are named below).  .whl/ is git-ignored; carry it in the device call.
set -euo pipefail
PYTHON=${1:-.venv/bin/python}
# device_run.sh's install line, with the dependencies the device image does not hold.
PACKAGES=(fastapi starlette pydantic pydantic_core annotated-types typing-inspection
          annotated-doc typing_extensions pydantic-settings python-dotenv uvicorn httptools
          watchfiles websockets orjson httpx2 httpcore2 truststore idna h11 anyio
          opentelemetry-api asgi-correlation-id python-json-logger prometheus_client
          prometheus-fastapi-instrumentator fastapi_offline python-multipart hypothesis
          sortedcontainers pytest-xdist execnet)
mkdir -p .whl
frozen=$("$PYTHON" -m pip freeze --all) || {
    echo "device_wheels: no pip at $PYTHON (make the venv first: pip install -e '.[test]')" >&2
    exit 2
}
platforms=()
for tag in manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_24_x86_64 \
           manylinux_2_27_x86_64 manylinux_2_28_x86_64 manylinux_2_31_x86_64 \
           manylinux_2_34_x86_64 manylinux_2_35_x86_64 manylinux1_x86_64 any; do
    platforms+=(--platform "$tag")
done
missing=0
for name in "${PACKAGES[@]}"; do
    # pip freeze spells names as installed; compare them normalised (PEP 503).
    want=$(echo "$name" | tr 'A-Z_.' 'a-z--')
    version=$(echo "$frozen" | awk -F'==' -v want="$want" \
        '{n=tolower($1); gsub(/[_.]/, "-", n); if (n == want) print $2}')
    if [ -z "$version" ]; then
        echo "device_wheels: $name is not installed in $PYTHON's environment" >&2
        missing=1
        continue
    fi
    if ! out=$("$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
            --python-version 3.12 --implementation cp "${platforms[@]}" -d .whl \
            "$name==$version" 2>&1); then
        echo "$out" | grep -v '^WARNING: Location' >&2
        missing=1
    fi
done
ls .whl | wc -l | xargs echo "device_wheels: wheels in .whl:"
du -sh .whl
exit $missing
