"""Owns /v1/snapshots: graph snapshots taken on demand, listed and downloaded."""
from __future__ import annotations

import asyncio
import os
from typing import Annotated, BinaryIO, Iterator

from fastapi import APIRouter, Depends, HTTPException, Path, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from starlette.concurrency import iterate_in_threadpool

from service.deps import StateDep, reject_unknown_parameters
from service.engine_service import ServiceUnavailable
from service.routes.graph import BATCH_HEADER
from storage import SnapshotRecord

router = APIRouter(prefix="/v1/snapshots", tags=["snapshots"],
                   dependencies=[Depends(reject_unknown_parameters)])

NPZ = "application/octet-stream"
DOWNLOAD_CHUNK_BYTES = 1 << 20


class SnapshotPublic(BaseModel):
    # A graph snapshot: the batch it is of (0: the bulk load), its size, when it was taken.
    batch: int
    vertices: int
    edges: int
    bytes: int
    created_at: str
    download: str


def _public(record: SnapshotRecord) -> SnapshotPublic:
    try:
        size = record.path.stat().st_size
    except FileNotFoundError:   # dropped by a newer snapshot since it was listed
        size = 0
    return SnapshotPublic(batch=record.seq, vertices=record.vertices, edges=record.edges,
                          bytes=size, created_at=record.created_at,
                          download=f"{router.prefix}/{record.seq}")


@router.post("", status_code=201, response_model=SnapshotPublic, responses={
    409: {"description": "the service is empty: no graph loaded, no batch applied"}})
async def take_snapshot(state: StateDep, response: Response):
    """Snapshot the graph as of the last batch now (a snapshot of that batch already
    taken is answered as it is).  Only the newest two snapshots are kept: an older one
    can no longer be downloaded."""
    taken = await state.engine.call(state.engine.take_snapshot)
    try:
        record = await asyncio.wrap_future(taken)
    except Exception as exc:   # the batch log still holds everything: nothing is lost
        raise ServiceUnavailable(f"the snapshot could not be written ({exc})") from exc
    response.headers["Location"] = f"{router.prefix}/{record.seq}"
    return _public(record)


@router.get("", response_model=list[SnapshotPublic])
async def list_snapshots(state: StateDep):
    """The snapshots kept, newest first."""
    return [_public(r) for r in await asyncio.to_thread(state.store.snapshots)]


@router.get("/{batch}", response_class=StreamingResponse, responses={
    200: {"content": {NPZ: {}}, "description": "the snapshot file: a NumPy .npz of the "
          "arrays vertex_ids, vertex_labels, edge_src, edge_dst, edge_labels and their "
          "sha256"},
    404: {"description": "no snapshot of this batch is kept"}})
async def download_snapshot(state: StateDep, batch: Annotated[int, Path(ge=0)]):
    """The snapshot of `batch` as its .npz file (np.load reads it; string labels are their
    ids, the dictionary is GET /v1/graph's `labels`)."""
    records = await asyncio.to_thread(state.store.snapshots)
    record = next((r for r in records if r.seq == batch), None)
    handle = None
    if record is not None:
        try:
            # Opened here: a newer snapshot may drop the file, not this open handle.
            handle = await asyncio.to_thread(open, record.path, "rb")
        except FileNotFoundError:
            pass
    if handle is None:
        raise HTTPException(404, f"no snapshot of batch {batch} is kept (GET /v1/snapshots "
                                 "lists those kept; POST /v1/snapshots takes one)")
    size = os.fstat(handle.fileno()).st_size
    return StreamingResponse(
        iterate_in_threadpool(_chunks(handle)), media_type=NPZ,
        headers={"Content-Length": str(size), BATCH_HEADER: str(batch),
                 "Content-Disposition": f'attachment; filename="{record.path.name}"'})


def _chunks(handle: BinaryIO) -> Iterator[bytes]:
    with handle:
        while chunk := handle.read(DOWNLOAD_CHUNK_BYTES):
            yield chunk
