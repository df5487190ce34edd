"""The benchmarks' figures: PNGs from small synthetic JSON lines, provenance, clear errors."""

import json
from pathlib import Path

import networkx as nx
import pytest

pytest.importorskip("matplotlib")

from benchmarks import gh_table, plots  # noqa: E402
from benchmarks.plots import PlotError, main, plot_file  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
H100 = "NVIDIA H100 80GB HBM3"


def _header(command: str, date: str = "2026-11-25T12:00:00+00:00", **extra) -> dict:
    return {"date": date, "command": command, "machine": "vm, 16 CPUs", "backend": "cuda",
            "gpu": H100, **extra}


def _gh(device_graph: str, date: str) -> list[dict]:
    header = _header(f"python -m benchmarks.gh_table --device-graph {device_graph}", date)
    return [{**header, "kind": kind, "index": i, "query": f"{kind}_{i}.graph",
             "match_seconds": 0.01 * (i + 1), "validate_seconds": 0.01,
             "update_seconds": 0.005 if device_graph == "pma" else 0.03,
             "device_graph": device_graph}
            for kind in ("dense", "tree") for i in range(3)]


def _stream() -> list[dict]:
    header = _header("python -m benchmarks.stream_bench --experiments latency pipeline",
                     device_graph="pma")
    latency = [{**header, "experiment": "latency", "kind": "dense", "batch_size": size,
                "seconds_p50": 0.001 * size ** 0.5, "seconds_p99": 0.002 * size ** 0.5}
               for size in (1, 100, 10_000)]
    pipeline = [{**header, "experiment": "pipeline", "kind": "dense", "batch_size": size,
                 "apply_batches_per_s": 300 / size ** 0.3,
                 "apply_stream_batches_per_s": 350 / size ** 0.3} for size in (1, 100)]
    rate = [{**header, "experiment": "rate", "kind": "dense", "rate": 0.02,
             "match_seconds": 0.1, "query": "dense_0.graph"}]
    return latency + pipeline + rate


def _service() -> list[dict]:
    return [{**_header("python -m benchmarks.service_bench", f"2026-11-25T12:0{c}:00+00:00",
                       device_graph="pma"),
             "clients": c, "batch_size": size, "batches_per_s": 100.0 * c / size ** 0.5,
             "p50_ms": 10.0 * size ** 0.3, "p99_ms": 20.0 * size ** 0.3}
            for c in (1, 4) for size in (1, 100)]


def _scale() -> list[dict]:
    header = _header("python -m benchmarks.scale_bench --scale 22", scale=22,
                     device_graph="pma")
    return [{**header, "what": "load", "seconds": 8.4},
            *({**header, "what": "match", "batch": size, "queries": 1, "p50_s": 0.005 * size,
               "p99_s": 0.01 * size} for size in (1, 100))]


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _assert_pngs(paths: list[Path], names: set[str]) -> None:
    assert {p.name for p in paths} == names
    for p in paths:
        data = p.read_bytes()
        assert data.startswith(PNG_SIGNATURE), p
        assert len(data) > 5_000, p     # a drawn figure, not an empty canvas


@pytest.mark.parametrize("records, names", [
    (_gh("pma", "2026-11-25T12:00:00+00:00") + _gh("lists", "2026-11-25T12:01:00+00:00"),
     {"bench-seconds.png", "bench-phases.png"}),
    (_stream(), {"bench-latency.png", "bench-pipeline.png"}),
    (_service(), {"bench-latency.png", "bench-throughput.png"}),
    (_scale(), {"bench-latency.png"}),
], ids=["gh_table", "stream_bench", "service_bench", "scale_bench"])
def test_each_kind_of_file_gives_its_figures(tmp_path, records, names):
    paths = plot_file(_write(tmp_path / "bench.jsonl", records), tmp_path / "out")
    _assert_pngs(paths, names)
    assert all(p.parent == tmp_path / "out" for p in paths)


def test_the_caption_names_every_run_with_date_device_and_command():
    records = [plots.Record(r) for r in _service()]
    text = "\n".join(plots.caption(records))
    for r in records:
        assert r["date"] in text
    assert text.count(H100) == 2
    assert "python -m benchmarks.service_bench" in text


def test_a_device_graph_is_read_from_the_command_when_the_record_lacks_it():
    record = plots.Record(_header("python -m benchmarks.stream_bench --device-graph lists"))
    assert plots.executor(record) == "cuda/lists"
    assert plots.executor(plots.Record(_header("python -m x", backend="cpu"))) == "cpu"


def test_an_unknown_kind_of_record_is_an_error_naming_the_line(tmp_path):
    path = _write(tmp_path / "odd.jsonl", _scale()[:1] + [{"date": "x", "speed": 3}])
    with pytest.raises(PlotError, match=r"odd\.jsonl:2: unknown kind of record"):
        plot_file(path, tmp_path)
    assert not list(tmp_path.glob("*.png"))


@pytest.mark.parametrize("records, field", [
    ([{k: v for k, v in r.items() if k != "p99_ms"} for r in _service()], "p99_ms"),
    ([{k: v for k, v in r.items() if k != "date"} for r in _scale()], "date"),
    ([{k: v for k, v in r.items() if k not in ("gpu", "machine")} for r in _scale()],
     "machine"),
])
def test_a_missing_field_is_an_error_naming_it(tmp_path, records, field):
    path = _write(tmp_path / "bench.jsonl", records)
    with pytest.raises(PlotError, match=rf"bench\.jsonl:\d+: missing field '{field}'"):
        plot_file(path, tmp_path / "out")


def test_the_cli_says_what_is_wrong_and_exits_2(tmp_path, capsys):
    path = _write(tmp_path / "bad.jsonl", [{"no": "kind"}])
    assert main([str(path), "--out", str(tmp_path)]) == 2
    assert "bad.jsonl:1: unknown kind of record" in capsys.readouterr().err
    assert main([str(tmp_path / "absent.jsonl"), "--out", str(tmp_path)]) == 2
    assert "absent.jsonl: cannot read" in capsys.readouterr().err


def test_printed_headers_give_runs_without_a_date_their_provenance(tmp_path):
    bare = [{k: v for k, v in r.items() if k not in ("date", "command", "machine", "gpu")}
            for r in _gh("pma", "d") + _gh("lists", "d")]
    path = _write(tmp_path / "gh.jsonl", bare)
    # gh_table's runs of one set each: dense then tree, pma then lists.
    runs = [("dense", ""), ("tree", ""), ("dense", " --device-graph lists"),
            ("tree", " --device-graph lists")]
    printed = "".join(f"date: 2026-11-25T12:0{i}:00+00:00\n"
                      f"command: python -m benchmarks.gh_table --kinds {kind}{flag}\n"
                      f"machine: vm\nbackend: cuda\ngpu: {H100}\ngraph: g\n\n| table |\n"
                      for i, (kind, flag) in enumerate(runs))
    (tmp_path / "gh.txt").write_text(printed)
    # Records are in file order: all pma (dense, tree), then all lists: the headers match.
    assert main([str(path), "--out", str(tmp_path / "out"),
                 "--headers", str(tmp_path / "gh.txt")]) == 0
    _assert_pngs(list((tmp_path / "out").glob("*.png")), {"gh-seconds.png", "gh-phases.png"})

    # A header whose command ran another device graph than its run is refused.
    (tmp_path / "swapped.txt").write_text(printed.replace(" --device-graph lists", "", 1)
                                          .replace("--kinds dense\n", "--kinds dense "
                                                   "--device-graph lists\n", 1))
    with pytest.raises(PlotError, match="does not match"):
        plot_file(path, tmp_path / "out", headers=tmp_path / "swapped.txt")
    (tmp_path / "short.txt").write_text(printed.split("| table |", 1)[0])
    with pytest.raises(PlotError, match="1 run headers for 4 runs"):
        plot_file(path, tmp_path / "out", headers=tmp_path / "short.txt")


def test_fill_gives_each_run_its_value_or_refuses_a_wrong_count(tmp_path):
    records = [plots.Record({k: v for k, v in r.items() if k != "device_graph"})
               for r in _service()]
    plots.apply_fill(records, "device_graph=pma,lists")
    assert [r["device_graph"] for r in records] == ["pma", "pma", "lists", "lists"]
    with pytest.raises(PlotError, match="3 values for 2 runs lacking 'gpu2'"):
        plots.apply_fill(records, "gpu2=a,b,c")
    with pytest.raises(PlotError, match="expected FIELD=VALUE"):
        plots.apply_fill(records, "no-equals-sign")


def test_gh_table_plot_flag_writes_figures_beside_its_json(tmp_path):
    g = nx.relaxed_caveman_graph(10, 6, 0.25, seed=3)
    graph = tmp_path / "edges.csv"
    graph.write_text("source,target\n" + "".join(f"{u},{v}\n" for u, v in g.edges))
    out = tmp_path / "runs" / "gh.jsonl"
    out.parent.mkdir()
    assert gh_table.main(["--graph", str(graph), "--num-labels", "2", "--size", "4",
                          "--per-set", "2", "--kinds", "dense", "tree", "--backend", "cpu",
                          "--no-warmup", "--queries-dir", str(tmp_path / "queries"),
                          "--json", str(out), "--plot"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert all({"date", "command", "machine", "backend"} <= set(r) for r in records)
    _assert_pngs(sorted(out.parent.glob("*.png")), {"gh-seconds.png", "gh-phases.png"})


def test_plot_without_json_is_refused(capsys):
    with pytest.raises(SystemExit):
        gh_table.main(["--plot"])
    assert "--plot draws the --json file" in capsys.readouterr().err
