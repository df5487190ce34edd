"""Owns the ``motifstream`` command line: argument parsing, JSON-lines output and exit statuses.

``match`` replays an update stream in batches and reports each query's exact
positive/negative match counts per batch (optionally listing the matches);
``count`` reports static match counts.  Results go to stdout as JSON lines;
errors are one ``motifstream: error: ...`` line on stderr.

Exit statuses: 0 success, 1 a batch was rejected, 2 bad input or arguments,
130 interrupted, 141 stdout closed early (the shells' SIGPIPE status).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import time
from importlib import metadata, resources


@contextlib.contextmanager
def paused_gc(freeze: bool = False):
    """The cycle collector off inside, as it was after.  For start-up: importing NumPy,
    Numba, FastAPI and the engine makes ~190,000 objects that stay alive, and the
    collector's ~290 passes over them found nothing to free (0.17 s of these imports and
    service.main's on the 2-vCPU VM, docs/benchmarks.md).  With `freeze`, what is alive
    at the end is frozen (gc.freeze) before the collector is on again: turned on with
    that much new, it would scan it all at once (0.1-0.2 s)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()


# The modules imported here live as long as the process: frozen, no collection scans them.
with paused_gc(freeze=True):
    from gpu import clock, compile_ahead
    from gpu.config import DEVICE_GRAPHS, EngineConfig
    from gpu.cuda.device import BACKENDS, NoCudaDevice, resolve_backend
    from gpu.engine import BatchRejected, Engine
    from gpu.io.graphs import load_graph, read_query
    from gpu.io.records import FormatError, LabeledGraph
    from gpu.io.streams import read_updates
    from gpu.plan.query import QueryGraph
    from gpu.warm_up import warm_up
    from service.progress import Progress

PROG = "motifstream"
DEFAULT_LIST_LIMIT = 1_000_000

EXIT_REJECTED = 1
EXIT_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

# The parsers and the engine report every bad-input condition as a ValueError
# (FormatError, QueryError) or an OSError; all of them are the user's to fix.
_INPUT_ERRORS = (ValueError, OSError, NoCudaDevice)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors: argparse already printed
        return int(exc.code or 0)
    quiet = getattr(args, "quiet", True)
    progress = Progress(sys.stderr, enabled=not quiet and sys.stderr.isatty())
    try:
        return args.command(args, progress)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`| head`); silence the interpreter's own flush at exit.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- stdout for the rest of the run
        return EXIT_BROKEN_PIPE
    except BatchRejected as exc:
        return _error(exc, EXIT_REJECTED)
    except _INPUT_ERRORS as exc:
        return _error(exc, EXIT_INPUT)
    finally:
        progress.close()


def _error(exc: Exception, status: int) -> int:
    print(f"{PROG}: error: {_describe(exc)}", file=sys.stderr)
    return status


def _describe(exc: Exception) -> str:
    # OSError's own str() leads with "[Errno 2]"; the file name and reason are what matter.
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)


# --------------------------------------------------------------------------- arguments


DEMO_QUERIES = ("triangle.graph", "square.graph", "house.graph")
DEMO_BATCH_SIZE = 500


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Exact batch-dynamic subgraph matching over a labeled graph.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    match = commands.add_parser(
        "match", help="replay an update stream; report per-batch match deltas",
        description="Apply an update stream in batches; print one JSON line per (batch, query) "
                    "with its positive/negative match counts, then a summary line.")
    _add_inputs(match)
    match.add_argument("--updates", metavar="FILE",
                       help="update stream (v/-v/e/-e lines)")
    match.add_argument("--batch-size", type=_positive_int, metavar="N",
                       help="update records per batch (default: the whole stream as one batch)")
    match.add_argument("--list", metavar="FILE",
                       help="also write every added/removed match to FILE as JSON lines")
    match.add_argument("--list-limit", type=_positive_int, default=DEFAULT_LIST_LIMIT,
                       metavar="N", help="most matches listed per batch and query and sign "
                                         f"(default {DEFAULT_LIST_LIMIT}); counts stay exact")
    match.add_argument("--retention", type=_non_negative_int, metavar="W",
                       help="edges expire: a batch that moves the watermark (the largest "
                            "event time, `e u v label time` lines) to T deletes every edge "
                            "timed <= T - W with it (default: never)")
    match.add_argument("--window", type=_non_negative_int, metavar="W",
                       help="every query is windowed: a match counts only while its data "
                            "edges are timed within W of each other (max - min <= W; "
                            "untimed edges are in no window)")
    match.set_defaults(command=_match)

    count = commands.add_parser(
        "count", help="count the matches of each query in the graph",
        description="Print one JSON line per query with its number of matches in the graph.")
    _add_inputs(count)
    count.set_defaults(command=_count)

    serve = commands.add_parser(
        "serve", help="run the HTTP service (standing queries, batches, result streams)",
        description="Serve the REST API on HOST:PORT with durable state under --data-dir. "
                    "Every flag can also be set as MOTIFSTREAM_<FLAG> in the environment "
                    "(flags win); MOTIFSTREAM_API_KEY turns on bearer-token auth.")
    serve.add_argument("--data-dir", metavar="DIR", help="store and snapshots "
                       "(default ./motifstream-data)")
    serve.add_argument("--host", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8080)")
    serve.add_argument("--backend", choices=BACKENDS, help="executor (default auto)")
    serve.add_argument("--directed", action="store_true", default=None,
                       help="a new store's graph is directed: edges are arcs u -> v (a store "
                            "that holds a graph keeps its kind)")
    serve.add_argument("--retention", type=_non_negative_int, metavar="W",
                       help="a new store's edges expire: a batch that moves the watermark "
                            "(the largest event time) to T deletes every edge timed <= T - W "
                            "(a store keeps its own; default: never)")
    serve.add_argument("--device-graph", choices=DEVICE_GRAPHS,
                       help="cuda: the graph's layout on the device (default pma)")
    serve_graph = serve.add_mutually_exclusive_group()
    serve_graph.add_argument("--graph", metavar="FILE",
                             help="bulk-load this graph when the store is empty")
    serve_graph.add_argument("--demo", action="store_true", default=None,
                             help="bulk-load the embedded demo graph (the one `match` "
                                  "replays) when the store is empty")
    serve_labels = serve.add_mutually_exclusive_group()
    serve_labels.add_argument("--labels", metavar="FILE", help="labels for an edge-list --graph")
    serve_labels.add_argument("--num-labels", type=_positive_int, metavar="K",
                              help="random labels for an edge-list --graph")
    serve.add_argument("--label-seed", type=int, metavar="S", help="seed for --num-labels")
    serve.add_argument("--synchronous", choices=("full", "normal"),
                       help="full (default): each batch is fsynced (survives power loss); "
                            "normal: survives process crashes")
    serve.add_argument("--snapshot-every", type=int, metavar="N",
                       help="graph snapshot every N batches (default 10000; 0: off)")
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    serve.add_argument("--access-log", action="store_true", default=None,
                       help="log every HTTP request (off by default)")
    serve.set_defaults(command=_serve)
    return parser


def _add_inputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graph", metavar="FILE",
                        help="data graph: t/v/e graph file or an edge list (SNAP/CSV); "
                             "omit --graph, --query (and --updates) to run the embedded demo")
    parser.add_argument("--query", action="append", metavar="FILE",
                        help="query graph file (t/v/e); repeat for several queries")
    parser.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="executor (default auto: cuda when usable, else cpu)")
    parser.add_argument("--device-graph", choices=DEVICE_GRAPHS, default=DEVICE_GRAPHS[0],
                        help="cuda: the data graph's layout on the device (default pma: a "
                             "packed memory array updated on the device; lists: the host's "
                             "lists mirrored)")
    labels = parser.add_mutually_exclusive_group()
    labels.add_argument("--labels", metavar="FILE",
                        help="vertex labels (<id> <label> lines) for an edge-list graph")
    labels.add_argument("--num-labels", type=_positive_int, metavar="K",
                        help="label an edge-list graph uniformly at random from K labels")
    parser.add_argument("--label-seed", type=int, default=0, metavar="S",
                        help="seed for --num-labels (default 0)")
    parser.add_argument("--directed", action="store_true",
                        help="the graph's and the queries' edges are arcs u -> v (`e u v`, an "
                             "edge list's `u v`)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress display on stderr")


def _positive_int(text: str, lowest: int = 1) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < lowest:
        kind = "a positive" if lowest == 1 else "a non-negative"
        raise argparse.ArgumentTypeError(f"must be {kind} integer, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    return _positive_int(text, 0)


def _version() -> str:
    try:
        return metadata.version(PROG)
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


# --------------------------------------------------------------------------- loading


def _use_demo_when_no_inputs(args) -> None:
    """No --graph/--query/--updates at all: run the embedded demo (a labeled GH slice)."""
    given = [args.graph is not None, bool(args.query), getattr(args, "updates", None) is not None]
    if any(given) and not all(given[: 3 if hasattr(args, "updates") else 2]):
        needed = "--graph, --query and --updates" if hasattr(args, "updates") else \
            "--graph and --query"
        raise ValueError(f"give {needed} together, or none of them to run the embedded demo")
    if any(given):
        return
    demo = resources.files("service") / "demo"
    args.graph = str(demo / "graph.txt")
    args.query = [str(demo / name) for name in DEMO_QUERIES]
    if hasattr(args, "updates"):
        args.updates = str(demo / "updates.txt")
        if args.batch_size is None:
            args.batch_size = DEMO_BATCH_SIZE


@contextlib.contextmanager
def _first_run(args, progress: Progress):
    """The command's inputs and backend settled, and a first run's compiling handled
    (gpu/compile_ahead.py: on a cold cache a small run is interpreted while the CPU
    executor compiles in the background)."""
    _use_demo_when_no_inputs(args)
    # Resolved first: a missing GPU should fail before a long graph load.
    args.backend = resolve_backend(args.backend)
    inputs = [args.graph, *args.query, getattr(args, "updates", None), args.labels]
    with compile_ahead.first_run([p for p in inputs if p is not None], args.backend,
                                 progress):
        yield


def _load(args, progress: Progress) -> tuple[Engine, dict[int, str]]:
    """The engine over the data graph with every query standing; query ids -> names."""
    backend = resolve_backend(args.backend)
    progress.phase(f"loading graph {args.graph}")
    graph = _load_graph(args)
    queries = _load_queries(args.query, progress, args.directed)
    progress.phase(f"indexing {graph.num_vertices} vertices, {graph.num_edges} edges")
    engine = Engine(graph, backend=backend, config=EngineConfig(device_graph=args.device_graph),
                    directed=args.directed, retention=getattr(args, "retention", None))
    window = getattr(args, "window", None)
    if window is not None:
        problem = engine.window_problem(window)
        if problem is not None:
            raise ValueError(f"--window: {problem}")
    return engine, {engine.add_query(q, window=window): q.name for q in queries}


def _load_graph(args) -> LabeledGraph:
    try:
        return load_graph(args.graph, labels_path=args.labels, num_labels=args.num_labels,
                          seed=args.label_seed, directed=args.directed)
    except FormatError:
        raise
    except ValueError:
        # load_graph's remaining complaints name its keyword arguments; say it in flags.
        if args.labels is None and args.num_labels is None:
            raise ValueError(f"{args.graph} is an edge list without labels; "
                             "give --labels FILE or --num-labels K") from None
        raise ValueError(f"{args.graph} is a graph file with its own labels; "
                         "--labels/--num-labels apply to edge lists only") from None


def _load_queries(paths: list[str], progress: Progress,
                  directed: bool = False) -> list[QueryGraph]:
    # Named by the path as given, so same-named files in different folders stay apart.
    if len(set(paths)) < len(paths):
        duplicate = next(p for p in paths if paths.count(p) > 1)
        raise ValueError(f"query {duplicate} is given more than once")
    progress.phase(f"reading {len(paths)} quer{'y' if len(paths) == 1 else 'ies'}")
    return [QueryGraph.from_labeled(read_query(path, directed), name=path, directed=directed)
            for path in paths]


# --------------------------------------------------------------------------- commands


def _count(args, progress: Progress) -> int:
    with _first_run(args, progress):
        engine, names = _load(args, progress)
        queries = list(names.items())
        while queries:
            qid, name = queries[0]
            compile_ahead.poll()
            progress.phase(f"counting {name}")
            t0 = clock.now()        # leaves Numba's compiling out
            try:
                matches = engine.count(qid)
            except compile_ahead.OutOfTime:
                # The engine's state is lost with the kernels' work: a new one, compiled.
                compile_ahead.compile_now(progress)
                engine, _ = _load(args, progress)
                continue
            _emit({"query": name, "matches": matches, "seconds": clock.now() - t0})
            queries.pop(0)
    return 0


def _match(args, progress: Progress) -> int:
    with _first_run(args, progress):
        return _match_stream(args, progress)


def _match_stream(args, progress: Progress) -> int:
    t0 = time.perf_counter()
    compiled_before = clock.compile_seconds()
    engine, names = _load(args, progress)
    if engine.backend == "cuda":
        # CuPy compiles its own kernels on first use too (not only gpu/cuda/kernels/*.cu,
        # which gpu.clock leaves out): all of them now, so that no batch is charged.
        progress.phase("loading the CUDA executor's kernels (compiled on a first run only)")
        warm_up("cuda", engine.config, directed=engine.directed)
    progress.phase(f"reading updates {args.updates}")
    updates = read_updates(args.updates)
    load_seconds = time.perf_counter() - t0

    batches = list(updates.batches(args.batch_size))  # slices: views, not copies
    totals = _Totals(names)
    truncated = 0
    progress.phase(f"applying {len(updates)} updates in {len(batches)} "
                   f"batch{'' if len(batches) == 1 else 'es'}")
    stream_start = time.perf_counter()
    done = 0                # batches reported
    with _open_listing(args.list) as listing:
        while done < len(batches):
            try:
                # apply_stream: on CUDA a batch's host work overlaps the kernels of the one
                # before.
                for res in engine.apply_stream(batches[done:],
                                               list_limit=args.list_limit if listing else 0):
                    i, done = done, done + 1
                    totals.add(res, len(batches[i]))
                    for qid, name in names.items():
                        delta = res.queries[qid]
                        line = {"batch": i, "query": name, "positive": delta.positive,
                                "negative": delta.negative, "seconds": res.seconds}
                        if delta.expired is not None:     # event times (issue 23)
                            line["expired"] = delta.expired
                        _emit(line)
                        if listing:
                            truncated += _write_matches(listing, i, name, delta)
                    progress.update(done, len(batches), totals.updates)
                    compile_ahead.poll()
            except compile_ahead.OutOfTime:
                # The engine's state is lost with the kernels' work: a new one, compiled,
                # brought to where the reported batches left the graph.
                compile_ahead.compile_now(progress)
                engine, _ = _load(args, progress)
                progress.phase(f"applying again the {done} batches reported so far")
                for _ in engine.apply_stream(batches[:done]):
                    pass
    wall_seconds = time.perf_counter() - stream_start
    progress.close()
    _emit(totals.summary(len(batches), engine.backend, seconds=wall_seconds,
                         load_seconds=load_seconds,
                         compile_seconds=clock.compile_seconds() - compiled_before))
    if truncated:
        print(f"{PROG}: warning: {truncated} (batch, query) match lists in {args.list} were "
              f"truncated at --list-limit {args.list_limit}; the counts are exact",
              file=sys.stderr)
    return 0


_SERVE_FLAGS = ("data_dir", "host", "port", "backend", "directed", "retention",
                "device_graph", "graph",
                "demo",
                "labels", "num_labels", "label_seed", "synchronous", "snapshot_every",
                "log_level", "access_log")


def _serve(args, progress: Progress) -> int:
    # Paused through the service's imports and its start-up too: the server turns it back
    # on when recovery begins, having frozen what was made until then (service/main.py).
    with paused_gc():
        import logging

        from pydantic import ValidationError

        from service.settings import Settings
        from storage import Store

        given = {name: getattr(args, name) for name in _SERVE_FLAGS
                 if getattr(args, name) is not None}
        try:
            settings = Settings(**given)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}"
                                 for e in exc.errors())
            raise ValueError(f"bad settings: {problems}") from None
        # The store's writer process starts before the server's imports: its interpreter and
        # the database's opening (~0.1 s, which the server's start waited for) run beside
        # them, on the other core.
        writer = Store.launch_writer(settings.data_dir, settings.synchronous) \
            if settings.store_writer == "process" else None
        try:
            from service.main import serve
            logging.basicConfig(level=settings.log_level.upper(),
                                format="%(asctime)s %(levelname)s %(name)s: %(message)s")
            serve(settings, launched_writer=writer)
        finally:
            if writer is not None:
                writer.discard()        # unless the store took it over
    return 0


class _Totals:
    """Sums over the batches for the summary line."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names
        self.queries = {qid: {"positive": 0, "negative": 0} for qid in names}
        self.applied: dict[str, int] = {}
        self.ignored: dict[str, int] = {}
        self.updates = 0

    def add(self, res, size: int) -> None:
        self.updates += size
        for qid, delta in res.queries.items():
            self.queries[qid]["positive"] += delta.positive
            self.queries[qid]["negative"] += delta.negative
        for total, part in ((self.applied, res.applied), (self.ignored, res.ignored)):
            for key, value in part.items():
                total[key] = total.get(key, 0) + value

    def summary(self, batches: int, backend: str, **seconds: float) -> dict:
        """The summary line.  Its times, all wall clock: `seconds` the stream's, from
        its first batch's start to its last result (batches overlap when pipelined, so
        it is not the sum of theirs), `load_seconds` reading and indexing the inputs,
        `compile_seconds` the part of both that Numba spent compiling (or loading
        compiled code), which no batch's own `seconds` includes."""
        return {"summary": True, "batches": batches, "updates": self.updates,
                "queries": {self.names[qid]: c for qid, c in self.queries.items()},
                "applied": self.applied, "ignored": self.ignored, **seconds,
                "backend": backend}


@contextlib.contextmanager
def _open_listing(path: str | None):
    if path is None:
        yield None
        return
    with open(path, "w") as f:
        yield f


def _write_matches(f, batch: int, name: str, delta) -> bool:
    """Write one query's listed matches for one batch; True when the list was cut short."""
    expired = (delta.removed_expired.tolist() if delta.removed_expired is not None
               else None)
    for sign, rows in (("+", delta.added), ("-", delta.removed)):
        for j, row in enumerate(rows.tolist()):
            record = {"batch": batch, "query": name, "sign": sign, "match": row}
            if sign == "-" and expired is not None:
                record["expired"] = expired[j]
            f.write(json.dumps(record))
            f.write("\n")
    if delta.truncated:
        f.write(json.dumps({"batch": batch, "query": name, "truncated": True}) + "\n")
    return delta.truncated


def _emit(record: dict) -> None:
    print(json.dumps(record))


if __name__ == "__main__":
    sys.exit(main())
