"""Owns the benchmarks' figures: PNGs drawn from the JSON lines the benchmark scripts append.

Each record is recognised by its fields as one of the four scripts' (`RECORD_KINDS`), and
each kind gets its figures:

* ``gh_table``: seconds per query per set and executor (one point per query, the median
  marked), and the batch's phases (validate, match, update) per set and executor, which
  puts the PMA against the mirrored lists when both are in the file;
* ``stream_bench``: latency (p50, p99) against batch size (``latency``), and batches per
  second of `apply` and `apply_stream` against batch size per executor (``pipeline``);
* ``service_bench``: latency against batch size, and throughput against clients;
* ``scale_bench``: match latency against batch size.

A run is the records of one ``date`` and ``command``; every figure's caption names each
run it draws (date, device, command verbatim), so a picture never loses its provenance.
Records missing provenance (gh_table's lines before it wrote its run header) can take it
from the benchmark's printed output (``--headers``); a field a script did not record
(service_bench's device graph, set through the environment) can be given per run
(``--fill``).  Neither changes a measured number.

    python -m benchmarks.plots FILE.jsonl [...] --out DIR [--headers OUT.txt] \\
        [--fill FIELD=VALUE[,VALUE...]]

matplotlib (the ``plots`` extra) is imported only to draw, through its Agg canvas: the
benchmarks and the service run without it.
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from gpu.config import DEVICE_GRAPHS

RECORD_KINDS = ("gh_table", "stream_bench", "service_bench", "scale_bench")
DPI = 100
CAPTION_WIDTH = 125
# The benchmarks' --plot flag (drawn by `plot_beside` once the --json file is written).
PLOT_HELP = ("also draw the --json file's figures beside it (PNG, benchmarks.plots; needs "
             "matplotlib: the plots extra)")


class PlotError(Exception):
    """A JSON-lines file that cannot be drawn; the message names the file, line and field."""


# ---------------------------------------------------------------- reading


def record_kind(record: dict) -> str | None:
    """Which benchmark wrote `record`, told by the fields only that script writes."""
    if "experiment" in record:
        return "stream_bench"
    if "what" in record:
        return "scale_bench"
    if "clients" in record and "batches_per_s" in record:
        return "service_bench"
    if "match_seconds" in record and "query" in record:
        return "gh_table"
    return None


class Record(dict):
    """One JSON line, knowing where it came from (for error messages)."""

    where: str

    def need(self, *fields: str) -> None:
        missing = [f for f in fields if f not in self]
        if missing:
            raise PlotError(f"{self.where}: missing field {missing[0]!r}")


def read_records(path: Path) -> list[Record]:
    """The records of one JSON-lines file, each checked to be of a known kind."""
    records = []
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise PlotError(f"{path}: cannot read: {e.strerror}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = Record(json.loads(line))
        except (json.JSONDecodeError, TypeError) as e:
            raise PlotError(f"{path}:{number}: not a JSON object: {e}") from None
        record.where = f"{path}:{number}"
        if record_kind(record) is None:
            raise PlotError(f"{record.where}: unknown kind of record (fields "
                            f"{', '.join(sorted(record)[:8])}); expected one of "
                            f"{', '.join(RECORD_KINDS)}")
        records.append(record)
    if not records:
        raise PlotError(f"{path}: no records")
    return records


def run_key(record: Record) -> tuple:
    return record.get("date"), record.get("command")


def runs_of(records: list[Record]) -> list[list[Record]]:
    """Consecutive records of one date and command; without a date (gh_table's lines before
    it wrote its header), a run ends where the set, executor or query index starts over."""
    runs: list[list[Record]] = []
    for r in records:
        if runs:
            last = runs[-1][-1]
            if "date" in r or "date" in last:
                same = run_key(r) == run_key(last)
            else:
                same = ((r.get("kind"), r.get("device_graph"), r.get("backend"))
                        == (last.get("kind"), last.get("device_graph"), last.get("backend"))
                        and r.get("index", 0) > last.get("index", -1))
            if same:
                runs[-1].append(r)
                continue
        runs.append([r])
    return runs


def parse_headers(text: str) -> list[dict[str, str]]:
    """The run headers a benchmark printed (`gh_table.run_header`): ``key: value`` lines
    from each ``date:`` line up to the first line of another shape."""
    fields = ("date", "command", "machine", "backend", "gpu")
    headers: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key == "date":
            current = {"date": value}
            headers.append(current)
        elif sep and key in fields and current is not None and key not in current:
            current[key] = value
        else:
            current = None
    return headers


def _option(command: str, flag: str) -> list[str] | None:
    """The values given to `flag` in a recorded command line, or None when not given."""
    words = shlex.split(command)
    if flag not in words:
        return None
    values = []
    for word in words[words.index(flag) + 1:]:
        if word.startswith("--"):
            break
        values.append(word)
    return values


def apply_headers(records: list[Record], headers: list[dict[str, str]], source: str) -> None:
    """Give the runs without a date the printed headers, in order, after checking that each
    header's command ran that run's set and device graph."""
    bare = [run for run in runs_of(records) if "date" not in run[0]]
    if len(bare) != len(headers):
        raise PlotError(f"{source}: {len(headers)} run headers for {len(bare)} runs "
                        "without a date")
    for run, header in zip(bare, headers):
        command = header.get("command", "")
        graph = (_option(command, "--device-graph") or [DEVICE_GRAPHS[0]])[0]
        kinds = _option(command, "--kinds")
        first = run[0]
        if first.get("device_graph", graph) != graph or (kinds and first.get("kind") not in kinds):
            raise PlotError(f"{source}: header of {header['date']} ({command}) does not match "
                            f"{first.where} (set {first.get('kind')}, device graph "
                            f"{first.get('device_graph')})")
        for r in run:
            for key, value in header.items():
                r.setdefault(key, value)


def apply_fill(records: list[Record], fill: str) -> None:
    """``FIELD=VALUE`` for every record lacking FIELD, or ``FIELD=V1,V2,...`` one value per
    run (in file order) of the records lacking it."""
    field, sep, values = fill.partition("=")
    if not sep or not field:
        raise PlotError(f"--fill {fill!r}: expected FIELD=VALUE[,VALUE...]")
    runs = [run for run in runs_of(records) if field not in run[0]]
    choices = values.split(",")
    if len(choices) not in (1, len(runs)):
        raise PlotError(f"--fill {fill!r}: {len(choices)} values for {len(runs)} runs "
                        f"lacking {field!r}")
    for i, run in enumerate(runs):
        for r in run:
            r.setdefault(field, choices[0 if len(choices) == 1 else i])


# ---------------------------------------------------------------- captions and labels


def device(record: Record) -> str:
    """The GPU when recorded, else the backend and the machine."""
    if "gpu" in record:
        return f"{record['gpu']} ({record.get('backend', 'cuda')})"
    record.need("machine")
    return f"{record.get('backend', '?')} on {record['machine']}"


def executor(record: Record) -> str:
    """The backend, with the device graph's layout for CUDA (from the record, else from the
    recorded command's --device-graph)."""
    backend = record.get("backend", "?")
    if backend != "cuda":
        return backend
    graph = record.get("device_graph") or (_option(record.get("command", ""), "--device-graph")
                                           or [None])[0]
    return f"cuda/{graph}" if graph else "cuda"


def caption(records: list[Record]) -> list[str]:
    """One entry per run drawn: date, device, command, wrapped to the figure's width."""
    lines = []
    for run in runs_of(records):
        first = run[0]
        first.need("date", "command")
        text = f"{first['date']} · {device(first)} · {first['command']}"
        lines += textwrap.wrap(text, CAPTION_WIDTH, subsequent_indent="    ")
    return lines


# ---------------------------------------------------------------- drawing


def _figure(title: str, records: list[Record]):
    """A one-axes Agg figure titled `title`, its caption (the runs' provenance) below."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    lines = caption(records)
    height = 4.4 + 0.14 * len(lines)
    fig = Figure(figsize=(8.5, height), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    fig.subplots_adjust(left=0.09, right=0.98, top=1 - 0.45 / height,
                        bottom=(0.6 + 0.14 * len(lines)) / height)
    ax.set_title(title, fontsize=10)
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=6.5, family="monospace", va="bottom")
    return fig, ax


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    return path


def _groups(records: list[Record], key: Callable[[Record], object]) -> dict:
    groups: dict = {}
    for r in records:
        groups.setdefault(key(r), []).append(r)
    return groups


def _log_axes(ax, sizes) -> None:
    """Log batch sizes (ticks at the sizes run) against a log y with plain numbers."""
    from matplotlib.ticker import FuncFormatter, NullLocator

    ax.set_xscale("log")
    ax.set_xticks(sorted(sizes), [f"{s:,}" for s in sorted(sizes)])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_yscale("log")
    plain = FuncFormatter(lambda y, _: f"{y:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.set_xlabel("batch size (edges)")


def _latency_figure(records: list[Record], title: str, size: str, p50: str, p99: str,
                    scale: float, unit: str, label: Callable[[Record], str], path: Path) -> Path:
    """p50 (solid) and p99 (dashed) against batch size, one colour per label."""
    for r in records:
        r.need(size, p50, p99)
    fig, ax = _figure(title, records)
    for i, (name, rs) in enumerate(_groups(records, label).items()):
        rs = sorted(rs, key=lambda r: r[size])
        xs = [r[size] for r in rs]
        colour = f"C{i}"
        ax.plot(xs, [r[p50] * scale for r in rs], "o-", color=colour, label=f"{name} p50")
        ax.plot(xs, [r[p99] * scale for r in rs], "s--", color=colour, label=f"{name} p99")
    _log_axes(ax, {r[size] for r in records})
    ax.set_ylabel(f"time per batch ({unit})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def gh_figures(records: list[Record], stem: Path) -> list[Path]:
    for r in records:
        r.need("kind", "match_seconds", "validate_seconds", "update_seconds", "backend")
    sets = list(dict.fromkeys(r["kind"] for r in records))
    executors = list(dict.fromkeys(executor(r) for r in records))
    width = 0.8 / len(executors)

    fig, ax = _figure("GH, 10% insertion batch: matching seconds per query, per set and "
                      "executor", records)
    for e, name in enumerate(executors):
        for s, kind in enumerate(sets):
            secs = [r["match_seconds"] for r in records if r["kind"] == kind
                    and executor(r) == name]
            if not secs:
                continue
            x = s - 0.4 + width * (e + 0.5)
            spread = [x + width * 0.5 * (j / max(len(secs) - 1, 1) - 0.5)
                      for j in range(len(secs))]
            ax.scatter(spread, secs, s=12, color=f"C{e}", alpha=0.7,
                       label=name if s == 0 else None)
            ax.hlines(statistics.median(secs), x - width * 0.4, x + width * 0.4,
                      color=f"C{e}", linewidth=2)
    ax.set_xticks(range(len(sets)), sets)
    ax.set_yscale("log")
    ax.set_ylabel("match seconds per query (bar: median)")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7)
    paths = [_save(fig, stem.with_name(f"{stem.name}-seconds.png"))]

    graphs = {r.get("device_graph") for r in records if r["backend"] == "cuda"}
    versus = ": PMA against lists" if {"pma", "lists"} <= graphs else ""
    fig, ax = _figure(f"GH, 10% insertion batch: mean seconds per batch phase{versus}",
                      records)
    phases = ("validate_seconds", "update_seconds", "match_seconds")
    for e, name in enumerate(executors):
        bottom = [0.0] * len(sets)
        for p, phase in enumerate(phases):
            heights = []
            for kind in sets:
                rs = [r[phase] for r in records if r["kind"] == kind and executor(r) == name]
                heights.append(statistics.fmean(rs) if rs else 0.0)
            xs = [s - 0.4 + width * (e + 0.5) for s in range(len(sets))]
            ax.bar(xs, heights, width * 0.9, bottom=bottom, color=f"C{p}",
                   edgecolor="black" if e else "none", hatch="//" if e % 2 else None,
                   label=phase.removesuffix("_seconds") if e == 0 else None)
            bottom = [b + h for b, h in zip(bottom, heights)]
        for s in range(len(sets)):
            ax.annotate(name, (s - 0.4 + width * (e + 0.5), bottom[s]), ha="center",
                        va="bottom", fontsize=7)
    ax.set_xticks(range(len(sets)), sets)
    ax.set_ylabel("mean seconds per query's batch")
    ax.legend(fontsize=7, title="phase", title_fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    paths.append(_save(fig, stem.with_name(f"{stem.name}-phases.png")))
    return paths


def stream_figures(records: list[Record], stem: Path) -> list[Path]:
    paths = []
    latency = [r for r in records if r["experiment"] == "latency"]
    if latency:
        for r in latency:
            r.need("kind")
        paths.append(_latency_figure(
            latency, "GH stream, all queries of a set standing: latency against batch size",
            "batch_size", "seconds_p50", "seconds_p99", 1e3, "ms",
            lambda r: f"{r['kind']}, {executor(r)}",
            stem.with_name(f"{stem.name}-latency.png")))
    pipeline = [r for r in records if r["experiment"] == "pipeline"]
    if pipeline:
        for r in pipeline:
            r.need("kind", "batch_size", "apply_batches_per_s", "apply_stream_batches_per_s")
        graphs = {executor(r) for r in pipeline}
        versus = ", PMA against lists" if {"cuda/pma", "cuda/lists"} <= graphs else ""
        fig, ax = _figure(f"GH stream: batches/s of apply and apply_stream{versus}", pipeline)
        for i, (name, rs) in enumerate(_groups(pipeline,
                                               lambda r: f"{r['kind']}, {executor(r)}").items()):
            rs = sorted(rs, key=lambda r: r["batch_size"])
            xs = [r["batch_size"] for r in rs]
            ax.plot(xs, [r["apply_batches_per_s"] for r in rs], "v--", color=f"C{i}",
                    label=f"{name}: apply")
            ax.plot(xs, [r["apply_stream_batches_per_s"] for r in rs], "o-", color=f"C{i}",
                    label=f"{name}: apply_stream")
        _log_axes(ax, {r["batch_size"] for r in pipeline})
        ax.set_ylabel("batches per second (median of rounds)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        paths.append(_save(fig, stem.with_name(f"{stem.name}-pipeline.png")))
    return paths


def service_figures(records: list[Record], stem: Path) -> list[Path]:
    for r in records:
        r.need("batch_size", "clients", "batches_per_s")

    def label(r: Record) -> str:
        return f"{executor(r)}, {r['clients']} clients"

    paths = [_latency_figure(
        records, "Service over HTTP (client to durable ack): latency against batch size",
        "batch_size", "p50_ms", "p99_ms", 1.0, "ms", label,
        stem.with_name(f"{stem.name}-latency.png"))]
    fig, ax = _figure("Service over HTTP: batches acknowledged per second against clients",
                      records)
    by_line = _groups(records, lambda r: f"{executor(r)}, batch of {r['batch_size']:,}")
    for i, (name, rs) in enumerate(by_line.items()):
        rs = sorted(rs, key=lambda r: r["clients"])
        ax.plot([r["clients"] for r in rs], [r["batches_per_s"] for r in rs], "o-",
                color=f"C{i}", label=name)
    clients = sorted({r["clients"] for r in records})
    ax.set_xticks(clients, [str(c) for c in clients])
    ax.set_xlabel("concurrent client connections")
    ax.set_ylabel("batches per second")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    paths.append(_save(fig, stem.with_name(f"{stem.name}-throughput.png")))
    return paths


def scale_figures(records: list[Record], stem: Path) -> list[Path]:
    match = [r for r in records if r["what"] == "match"]
    if not match:
        return []
    for r in match:
        r.need("queries")
    scale = match[0].get("scale")
    title = (f"R-MAT 2^{scale} vertices" if scale is not None else "Scale benchmark") + \
        ": match latency against batch size, queries standing"
    return [_latency_figure(match, title, "batch", "p50_s", "p99_s", 1e3, "ms",
                            lambda r: f"{executor(r)}, {r['queries']} "
                            f"{'query' if r['queries'] == 1 else 'queries'}",
                            stem.with_name(f"{stem.name}-latency.png"))]


FIGURES = {"gh_table": gh_figures, "stream_bench": stream_figures,
           "service_bench": service_figures, "scale_bench": scale_figures}


def plot_file(path: Path, out: Path, headers: Path | None = None,
              fills: list[str] = ()) -> list[Path]:
    """Draw every figure of one JSON-lines file into `out` as ``<stem>-<figure>.png``."""
    records = read_records(Path(path))
    if headers is not None:
        apply_headers(records, parse_headers(Path(headers).read_text()), str(headers))
    for fill in fills:
        apply_fill(records, fill)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / Path(path).stem
    paths = []
    for kind, rs in _groups(records, record_kind).items():
        paths += FIGURES[kind](rs, stem)
    return paths


def plot_beside(json_path) -> list[Path]:
    """What a benchmark's ``--plot`` does: the figures of its ``--json`` file, beside it."""
    json_path = Path(json_path)
    paths = plot_file(json_path, json_path.parent)
    for p in paths:
        print(f"figure: {p}")
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.plots",
                                description=__doc__.split("\n", 1)[0])
    p.add_argument("files", type=Path, nargs="+", help="JSON-lines files of the benchmarks")
    p.add_argument("--out", type=Path, required=True, help="folder for the PNGs")
    p.add_argument("--headers", type=Path,
                   help="the benchmark's printed output, whose run headers give the runs "
                        "without a date their date, command and device (one file only)")
    p.add_argument("--fill", action="append", default=[], metavar="FIELD=VALUE[,VALUE...]",
                   help="a field the records lack: one value, or one per run in file order")
    args = p.parse_args(argv)
    if args.headers and len(args.files) != 1:
        p.error("--headers goes with one file")
    try:
        for path in args.files:
            for figure in plot_file(path, args.out, args.headers, args.fill):
                print(figure)
    except PlotError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
