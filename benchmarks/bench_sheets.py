"""Reading .xlsx workbooks: python-calamine against openpyxl's read-only mode, and bunko's loader.

Writes (untimed) workbooks of N rows split over 3 sheets, 8 columns each (an id, a date, a name,
a category, numbers and a formula with its cached value), with the fixture writer of
``tests/data/make_fixtures.py``. Each reader then runs in a fresh child process over each workbook,
turning every cell into text (``bunko.loaders.tables.cell_text``) the way the loader does, and
reports its wall time (best of ``--repeat``) and the child's peak RSS (``VmHWM``), with the RSS of a child that
only imports the same modules (so the difference is what reading cost):

* ``calamine``: ``CalamineWorkbook`` and ``iter_rows`` (the whole of a sheet is read into memory);
* ``openpyxl``: ``load_workbook(read_only=True, data_only=True)`` and ``iter_rows(values_only=True)``
  (a sheet's XML is streamed);
* ``loader``: ``bunko.loaders.sheets.load_xlsx`` (reads with one of the two, renders the Markdown
  tables and builds the document).

    python benchmarks/bench_sheets.py [--rows 15000 200000] [--repeat 3] [--shape mixed|numbers] [--json]

``--shape numbers`` writes one sheet of eight number columns instead (no shared strings: the most
cells for the bytes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
READERS = ("calamine", "openpyxl", "loader")
CATEGORIES = ["文具", "家具", "食品", "工具", "書籍"]


def _fixtures() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_fixtures", ROOT / "tests" / "data" / "make_fixtures.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def rows(first: int, count: int, formula: Any) -> Iterator[list[Any]]:
    yield ["品番", "登録日", "品名", "分類", "単価", "数量", "金額", "備考"]
    for i in range(first, first + count):
        price, quantity = 100 + i % 900, 1 + i % 17
        yield [f"P-{i:07d}", dt.date(2020, 1, 1) + dt.timedelta(days=i % 1500), f"品目{i}",
               CATEGORIES[i % 5], price, quantity, formula(f"E{i - first + 2}*F{i - first + 2}", price * quantity),
               "在庫あり" if i % 3 else ""]


def number_rows(count: int) -> Iterator[list[Any]]:
    yield [f"値{c + 1}" for c in range(8)]
    for i in range(count):
        yield [i, i * 0.5, i % 97, i % 1013 * 1.25, i * 3, i % 7, i * 0.001, -i]


def write_workbook(path: Path, total: int, shape: str = "mixed") -> None:
    fixtures = _fixtures()
    if shape == "numbers":  # one sheet of numbers only: no shared strings, the most cells per byte
        path.write_bytes(fixtures.make_xlsx([("数値", number_rows(total))]))
        return
    per_sheet = [total // 3 + (1 if s < total % 3 else 0) for s in range(3)]
    starts = [sum(per_sheet[:s]) for s in range(3)]
    sheets = [(f"シート{s + 1}", rows(starts[s], per_sheet[s], fixtures.Formula)) for s in range(3)]
    path.write_bytes(fixtures.make_xlsx(sheets))


def read(reader: str, path: Path) -> int:
    """Every cell of the workbook as text; returns the number of non-empty cells."""
    from bunko.loaders.tables import cell_text

    cells = 0
    if reader == "calamine":
        import python_calamine

        with python_calamine.CalamineWorkbook.from_path(str(path)) as workbook:
            for name in workbook.sheet_names:
                for row in workbook.get_sheet_by_name(name).iter_rows():
                    cells += sum(1 for value in row if cell_text(value))
    elif reader == "openpyxl":
        import openpyxl

        workbook = openpyxl.load_workbook(path, read_only=True, data_only=True)
        for sheet in workbook.worksheets:
            for values in sheet.iter_rows(values_only=True):
                cells += sum(1 for value in values if cell_text(value))
        workbook.close()
    else:
        from bunko.loaders import LoadOptions
        from bunko.loaders.sheets import load_xlsx

        document = load_xlsx(path, LoadOptions())[0]
        cells = len(document.parts)
    return cells


def child(reader: str, path: Path | None, repeat: int) -> dict[str, Any]:
    """Run in the child process: import, then read ``repeat`` times (or not at all, for the baseline)."""
    import openpyxl  # noqa: F401
    import python_calamine  # noqa: F401

    import bunko.loaders.sheets  # noqa: F401
    from bunko.errors import BunkoError

    best, counted, error = float("inf"), 0, None
    if path is not None:
        for _ in range(repeat):
            started = time.perf_counter()
            try:
                counted = read(reader, path)
            except BunkoError as exc:  # a workbook past the loader's limits (100 MB unpacked)
                error = type(exc).__name__
            best = min(best, time.perf_counter() - started)
    return {"seconds": None if path is None else round(best, 3), "counted": counted, "peak_rss_mb": peak_rss_mb(),
            "error": error}


def peak_rss_mb() -> float:
    """The process's peak resident set size (``VmHWM``: unlike ``ru_maxrss``, it starts afresh at exec, so a
    child does not report the memory of the parent it was forked from)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def run_child(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", *args], check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, nargs="+", default=[15000, 200000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shape", choices=["mixed", "numbers"], default="mixed",
                        help="mixed: 3 sheets of text, dates, numbers and formulas; "
                             "numbers: 1 sheet of 8 number columns")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        reader, file = args.child[0], (args.child[1] if len(args.child) > 1 else None)
        print(json.dumps(child(reader, Path(file) if file else None, args.repeat)))
        return
    baseline = run_child("none")["peak_rss_mb"]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for total in args.rows:
            path = Path(tmp) / f"rows{total}.xlsx"
            write_workbook(path, total, args.shape)
            size = path.stat().st_size
            for reader in READERS:
                result = run_child(reader, str(path), "--repeat", str(args.repeat))
                results.append({"rows": total, "shape": args.shape, "file_mb": round(size / 1e6, 2), "reader": reader,
                                **result,
                                 "rss_over_baseline_mb": round(result["peak_rss_mb"] - baseline, 1)})
    if args.json:
        print(json.dumps({"baseline_rss_mb": baseline, "results": results}, ensure_ascii=False, indent=1))
        return
    print(f"baseline (imports only) peak RSS {baseline} MB; best of {args.repeat}")
    print(f"{'rows':>8} {'file MB':>8} {'reader':>9} {'seconds':>8} {'peak MB':>8} {'+ MB':>7}")
    for r in results:
        print(f"{r['rows']:8d} {r['file_mb']:8.2f} {r['reader']:>9} {r['seconds']:8.3f} {r['peak_rss_mb']:8.1f} "
              f"{r['rss_over_baseline_mb']:7.1f}  {r['error'] or ''}")


if __name__ == "__main__":
    main()
