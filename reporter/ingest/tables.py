"""Read profiler output people already have: key_averages() text tables.

``parse_tables(text)`` finds every table in a text (fixed-width tables printed
by ``key_averages().table()`` from torch 1.3 to 2.x, and Markdown pipe tables
made from them), merges tables that are views of one profile (same totals)
and returns one Profile per distinct profile, labelled from the text before
it. No torch import; nothing from the input is executed.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadInput, read_error
from ..model import device as devices
from ..model.profile import KIND_KERNEL, Op, Profile, classify

# Cells are separated by two or more spaces (or tabs); any other character, a vertical tab
# or U+2028 in an operator's name included, belongs to the cell.
_TOKEN = re.compile(r"[^ \t]+(?: [^ \t]+)*")
# Bounded repetitions and a word boundary keep every search linear in the line's length.
_FOOTER = re.compile(r"(?P<self>\bSelf )?\b(?P<dev>[A-Za-z]{1,16}) time total:[ \t]{0,64}"
                     r"(?P<val>-?\d{1,24}(?:\.\d{1,24})?[ \t]{0,8}[num]?s)\b")
_NUMBER = r"(-?\d{1,24}(?:\.\d{1,24})?)"  # bounded: a cell of 5,000 digits is no time
_TIME = re.compile(rf"^{_NUMBER}\s*(ns|us|ms|s)$")
_MEM = re.compile(rf"^{_NUMBER}\s*(b|B|Kb|KB|Mb|MB|Gb|GB|Tb|TB)$")
_OPERATOR_NAME = re.compile(r"^[a-z_][a-z0-9_]*::")
_PCT = re.compile(rf"^{_NUMBER}%$")
MAX_LINE = 1 << 20  # bytes in one line of a table file
_TIME_UNITS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
_MEM_UNITS = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _separator(line: str) -> str | None:
    """The prefix before a table's separator (``----  ----``), or None if not one.

    Linear in the line's length: the separator is the trailing run of at least two
    groups of three or more dashes, separated by spaces.
    """
    line = line.rstrip(" ")
    if not line.endswith("---"):
        return None
    pos, groups, first = len(line), 0, 0
    while True:
        end = pos
        while pos > 0 and line[pos - 1] == "-":
            pos -= 1
        if end - pos < 3:  # a short run of dashes is not part of the separator
            break
        groups, first = groups + 1, pos
        gap = pos
        while gap > 0 and line[gap - 1] == " ":
            gap -= 1
        if gap == pos:  # the group starts the line or follows something else
            break
        pos = gap
    return line[:first] if groups >= 2 else None


def parse_time_us(text: str) -> float | None:
    m = _TIME.match(text.strip())
    return float(m.group(1)) * _TIME_UNITS[m.group(2)] if m else None


def parse_mem_b(text: str) -> int | None:
    m = _MEM.match(text.strip())
    return int(round(float(m.group(1)) * _MEM_UNITS[m.group(2)[0].lower()])) if m else None


def _column_field(header: str) -> str | None:
    """Map a column header of any torch version to an Op field.

    Share columns map to "pct:<header>" (used only to derive missing totals);
    None means derivable or unknown.
    """
    h = " ".join(header.split())
    if h.startswith("Self ") and h.endswith("%"):
        return f"pct:{h}"
    if h == "Name":
        return "name"
    if h.startswith("# of") or h.startswith("Number of"):
        return "calls"
    if h == "Input Shapes":
        return "input_shapes"
    if h.endswith("%") or h.endswith("avg") or "FLOP" in h or h in ("Source Location",
                                                                       "Overload Name",
                                                                       "Node ID"):
        return None
    if h in ("Self CPU", "Self CPU total"):
        return "self_cpu_us"
    if h == "CPU total":
        return "cpu_total_us"
    if h == "CPU Mem":
        return "cpu_mem_b"
    if h == "Self CPU Mem":
        return "self_cpu_mem_b"
    m = re.fullmatch(r"(Self )?([A-Za-z]+)( total| Mem)?", h)
    if m and m.group(2) != "CPU":
        self_, suffix = bool(m.group(1)), m.group(3)
        if suffix == " Mem":
            return "self_device_mem_b" if self_ else "device_mem_b"
        if suffix == " total" and not self_:
            return "device_total_us"
        if suffix is None and self_:
            return "self_device_us"
    return None


@dataclass
class Table:
    columns: list[str]
    rows: list[dict[str, str]]
    totals: dict[str, float] = field(default_factory=dict)  # self_cpu_us, self_device_us
    device: str | None = None  # "cuda", "xpu", ... from the footer or the columns
    line: int = 0


def _cells(line: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(line)]


def _assign(cells, header, right_aligned: bool) -> dict[int, str]:
    """Cells of one row to column indexes: by order when the counts agree, else by position."""
    if len(cells) == len(header):
        return {i: c[2] for i, c in enumerate(cells)}
    out: dict[int, str] = {}
    for start, end, text in cells:
        if right_aligned:
            i = min(range(len(header)), key=lambda k: abs(header[k][1] - end))
        else:
            i = min(range(len(header)), key=lambda k: abs(header[k][0] - start))
        out.setdefault(i, text)
    return out


def _strip_prefix(line: str, prefix: str) -> str:
    if prefix.strip() and line.startswith(prefix.rstrip()):
        return line[len(prefix):] if line.startswith(prefix) else line[len(prefix.rstrip()):]
    return line


def _fixed_tables(lines: list[str]) -> list[Table]:
    tables, i = [], 0
    while i < len(lines):
        prefix = _separator(lines[i])
        if prefix is None or i + 2 >= len(lines) or _separator(lines[i + 2]) is None:
            i += 1
            continue
        header_line = _strip_prefix(lines[i + 1], prefix).rstrip()
        header = _cells(header_line)
        if not any(c[2] == "Name" for c in header):
            i += 1
            continue
        names = [c[2] for c in header]
        fields = [_column_field(n) for n in names]
        right = header[0][1] > len("Name") and header_line[:header[0][0]].strip() == ""
        table = Table(columns=names, rows=[], line=i)
        j = i + 3
        while j < len(lines):
            raw = _strip_prefix(lines[j], prefix).rstrip()
            if _separator(raw) is not None:
                break
            if (raw.lstrip().startswith(("```", "#", "<")) or _FOOTER.search(raw)) \
                    and len(_cells(raw)) != len(header):
                break  # a fence, heading, tag or footer after a table without its closing
                # line; a whole row is a row, whatever its name starts with or holds
                # (<lambda>, #3, a record_function named "Self CPU time total: 5ms")
            if raw.strip() in ("", "..."):
                j += 1
                continue
            cells = _cells(raw)
            values = _assign(cells, header, right)
            if "name" in fields and fields.index("name") not in values:
                j += 1  # a continuation row (multi-line Source Location): nothing to count
                continue
            table.rows.append({f: v for k, v in values.items()
                               if k < len(fields) and (f := fields[k])})
            j += 1
        if j < len(lines) and _separator(_strip_prefix(lines[j], prefix)) is not None:
            j += 1
        for k in range(j, min(j + 3, len(lines))):  # footers follow the closing separator
            for fm in _FOOTER.finditer(lines[k]):
                key = "self_cpu_us" if fm.group("dev").upper() == "CPU" else "self_device_us"
                table.totals.setdefault(key, parse_time_us(fm.group("val")) or 0.0)
                if key == "self_device_us":
                    table.device = fm.group("dev").lower()
        tables.append(table)
        i = j
    return tables


def _pipe_cells(line: str) -> list[str]:
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    cells = re.split(r"(?<!\\)\|", body)
    clean = []
    for c in cells:
        c = c.replace("\\|", "|").replace("<br/>", " ").replace("<br>", " ").strip()
        if len(c) >= 2 and c.startswith("`") and c.endswith("`"):
            c = c.strip("`").strip()  # a code span: its text is literal
        else:  # prose: undo what a Markdown renderer undoes ("unsigned int\*", "&lt;")
            c = html.unescape(_MD_ESCAPE.sub(r"\1", c))
        clean.append(c)
    return clean


_MD_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")  # a backslash before ASCII punctuation


def _pipe_tables(lines: list[str]) -> list[Table]:
    tables, i = [], 0
    while i + 1 < len(lines):
        head, sep = lines[i], lines[i + 1]
        if "|" in head and re.fullmatch(r"\s*\|?(\s*:?-{3,}:?\s*\|)+\s*:?-*:?\s*\|?\s*", sep):
            names = _pipe_cells(head)
            if "Name" in names:
                fields = [_column_field(n) for n in names]
                table = Table(columns=names, rows=[], line=i)
                j = i + 2
                while j < len(lines) and "|" in lines[j]:
                    cells = _pipe_cells(lines[j])
                    table.rows.append({f: v for f, v in zip(fields, cells) if f})
                    j += 1
                tables.append(table)
                i = j
                continue
        i += 1
    return tables


def _op(row: dict[str, str]) -> Op | None:
    name = row.get("name", "").strip()
    if not name:
        return None
    op = Op(name=name)
    for key, text in row.items():
        text = text.strip()
        if key == "name" or key.startswith("pct:") or text in ("", "--"):
            continue
        if key == "calls":
            try:
                op.calls = int(text.replace(",", "")[:24])
            except ValueError:
                pass
        elif key == "input_shapes":
            op.input_shapes = text
        elif key.endswith("_us"):
            value = parse_time_us(text)
            if value is not None:
                setattr(op, key, value)
        elif key.endswith("_b"):
            value = parse_mem_b(text)
            if value is not None:
                setattr(op, key, value)
    # Rows with device time and no CPU time are kernels, unless named like an operator
    # (a table whose CPU columns were dropped still lists aten:: operators).
    device_only = (not _OPERATOR_NAME.match(name) and op.self_cpu_us == 0
                   and op.cpu_total_us == 0 and op.self_device_us > 0)
    op.kind = classify(name, device_side=device_only,
                       host_side=op.self_cpu_us > 0 or op.cpu_total_us > 0)
    return op


def _label(lines: list[str], line: int, default: str) -> str:
    """A profile's name from the text above its table.

    A sentence right above the table (within three non-blank lines) names it
    best; else the nearest Markdown heading above, not past another table;
    else the nearest sentence; "==== banners ====" and log lines do not count.
    """
    prose, seen = None, 0
    for k in range(line - 1, max(-1, line - 200), -1):
        raw = lines[k].strip()
        if not raw:
            continue
        seen += 1
        if re.match(r"#{1,6} \S", raw):
            return _title((prose if prose and prose[1] <= 3 else (raw.lstrip("#").strip(), 0))[0])
        if raw.startswith("|") or _FOOTER.match(raw) or _separator(lines[k]) is not None:
            break  # the previous table: what is above belongs to it
        if (prose is None and not raw.startswith(("=", "[W", "```", "<", "- [", "- Self"))
                and not set(raw) <= set("-`|:")):
            prose = (raw, seen)
    return _title(prose[0]) if prose else default


_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|[。！？]")
_WORD = re.compile(r"[A-Za-z0-9_]")


def _title(text: str, width: int = 80) -> str:
    """A profile's name from a line of prose: its first sentence, at most ``width``
    characters cut between words (or between CJK characters) with "…", no trailing colon."""
    text = " ".join(text.split())
    end = _SENTENCE_END.search(text)
    if end and end.end() < len(text):
        text = text[:end.end()]
    if len(text) > width:
        cut = width - 1
        while cut > 1 and _WORD.match(text[cut - 1]) and _WORD.match(text[cut]):
            cut -= 1  # not inside a word
        text = text[:cut if cut > 1 else width - 1].rstrip(" ,;:，、；：") + "…"
    return text.rstrip(" :：")


def parse_tables(text: str, source: str = "input") -> list[Profile]:
    """Every profile found in a text; raises BadInput when there is none."""
    # Lines end at "\n" (and "\r\n") only: str.splitlines also cuts at a vertical tab, a
    # form feed or U+2028 inside an operator's name, and the row's end was lost.
    newline = "\n" if "\n" in text or "\r" not in text else "\r"  # "\r" alone: old Macs
    lines = [line.removesuffix("\r") for line in text.split(newline)]
    tables = sorted(_fixed_tables(lines) + _pipe_tables(lines), key=lambda t: t.line)
    tables = [t for t in tables if t.rows]
    if not tables:
        raise BadInput(f"{source}: no profiler table found (expected the output of "
                       "key_averages().table() or a Markdown table made from it)",
                       error_id="no-table")
    profiles: list[Profile] = []
    keys: list[tuple] = []
    for t in tables:
        ops = [o for o in (_op(r) for r in t.rows) if o is not None]
        _fill_totals(t, ops)
        key = (round(t.totals.get("self_cpu_us", 0.0)), round(t.totals.get("self_device_us", 0.0)))
        shapes = "input_shapes" in [_column_field(c) for c in t.columns] and any(
            o.input_shapes not in (None, "[]", "") for o in ops)
        if key != (0, 0) and key in keys:
            p = profiles[keys.index(key)]
        else:
            p = Profile(label=_label(lines, t.line, f"profile {len(profiles) + 1}"),
                        device_type=t.device, self_cpu_us=t.totals.get("self_cpu_us", 0.0),
                        self_device_us=t.totals.get("self_device_us", 0.0))
            profiles.append(p)
            keys.append(key)
        if shapes:
            p.ops_by_shape.extend(ops)
        else:
            seen = {(o.name, o.calls, o.self_cpu_us, o.self_device_us) for o in p.ops}
            p.ops.extend(o for o in ops if (o.name, o.calls, o.self_cpu_us, o.self_device_us)
                         not in seen)
    for p in profiles:
        if not p.ops:  # only grouped-by-shape views: they are the operators
            p.ops = list(p.ops_by_shape)
        if p.device_type in (None, devices.CUDA.kind) and p.self_device_us > 0:
            # "Self CUDA" columns: NVIDIA's, or AMD's under a HIP build (its calls and
            # kernels tell)
            p.device_type = devices.of("cuda", runtime_calls=(o.name for o in p.ops),
                                       kernels=(o.name for o in p.ops
                                                if o.kind == KIND_KERNEL)).kind
    return profiles


def _fill_totals(table: Table, ops: list[Op]) -> None:
    """Totals for tables without footers: the largest row's time divided by its share."""
    for key in ("self_cpu_us", "self_device_us"):
        if key in table.totals:
            continue
        best_value, best_share, column = 0.0, 0.0, None
        for row, op in zip(table.rows, ops):
            for name, text in row.items():
                if not name.startswith("pct:"):
                    continue
                is_cpu = name.startswith("pct:Self CPU")
                if is_cpu != (key == "self_cpu_us"):
                    continue
                m = _PCT.match(text.strip())
                share = float(m.group(1)) / 100 if m else 0.0
                value = getattr(op, key)
                if share > best_share and value > 0:
                    best_value, best_share, column = value, share, name
        if best_share > 0:
            table.totals[key] = best_value / best_share
            if key == "self_device_us" and table.device is None and column:
                table.device = column.split()[1].lower()


def read_text(path: Path) -> str:
    """A text file's content, or one clear BadInput saying why it cannot be read."""
    if not path.exists():
        raise BadInput(f"{path}: no such file", error_id="bad-input")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise read_error(path, exc) from exc
    if not data.strip():
        raise BadInput(f"{path} is empty", error_id="no-table")
    if b"\x00" in data[:65536]:
        raise BadInput(f"{path} is binary, not a profiler table", error_id="no-table")
    longest = max(map(len, data.split(b"\n")))
    if longest > MAX_LINE:
        raise BadInput(f"{path} has a line of {longest:,} bytes, over the limit of "
                       f"{MAX_LINE:,}: not a profiler table", error_id="too-long")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path} is not UTF-8 text (byte {exc.start})", error_id="no-table") from exc
