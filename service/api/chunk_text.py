"""Chunks in plain JSON form parsed with numpy, not json.

json.loads makes a Python float and a list slot per number (~25× the body with the arrays
built from them). A chunk in plain JSON form ({"x": [[n, …], …], "y": [n, …]}, numbers as
JSON writes them) is checked and parsed without Python objects: a map of character classes
checks the grammar with substring counts, the brackets give the rows, and numpy's strtod-based
fromstring (Python's own float conversion: the same doubles as json) reads the numbers
straight into the block. Anything else (other whitespace, escapes in keys, empty rows, very
long digit runs, bare -0, which json reads as the integer 0) goes to json, as do all errors,
so answers and stored blocks are the same either way (tests/service/api/test_memory_bounds.py).
"""

from __future__ import annotations

import re

import numpy as np

from modelcompare.service.store.codec import HEADER


def _classes() -> bytes:
    table = bytearray(b"?" * 256)
    for char in b',[]{}":xy.+-':
        table[char] = char
    for char in b" \t\n\r":
        table[char] = ord(" ")
    for char in b"eE":
        table[char] = ord("e")
    for char in b"123456789":
        table[char] = ord("1")
    table[ord("0")] = ord("0")
    return bytes(table)


_CLASSES = _classes()
_DIGITS = bytes.maketrans(b"0", b"1")
_HEAD = re.compile(rb' *\{ *"([xy])" *: *')
_BETWEEN = re.compile(rb' *, *"([xy])" *: *')
_TAIL = re.compile(rb' *\} *')
_PIECE_BYTES = 1024 * 1024  # text parsed per numpy call


_SYMBOLS = b'01.e+-,[] {}":xy'  # the 16 classes, numbered 0..15 for the 4-gram table
_NUMBERED = bytes.maketrans(_SYMBOLS, bytes(range(16)))


def _bad_4grams() -> np.ndarray:
    """For every 4 classes (a, b, c, d), whether b in that context breaks a JSON number, or makes
    one strtod reads otherwise than json: a sign, dot or exponent out of place, a leading zero, or
    a bare -0 (json's integer 0, +0.0; strtod's -0.0)."""
    digits, start = b"01", b",[ "
    bad = np.zeros(1 << 16, dtype=bool)
    for code in range(1 << 16):
        a, b, c, d = (_SYMBOLS[(code >> shift) & 15] for shift in (12, 8, 4, 0))
        if b == ord("+"):
            bad[code] = a != ord("e") or c not in digits
        elif b == ord("-"):
            bad[code] = (a not in b"e" + start or c not in digits
                         or (a != ord("e") and c == ord("0") and d not in b".e"))
        elif b == ord("."):
            bad[code] = a not in digits or c not in digits
        elif b == ord("e"):
            bad[code] = a not in digits or c not in b"01+-"
        elif b == ord("0"):
            bad[code] = a in start and c in digits
    return bad


_BAD = _bad_4grams()
_SLICE = 1 << 18


def _grammar(s: bytes) -> np.ndarray | None:
    """The count of each class in the class map ``s`` (positions as ``_SYMBOLS``) when every
    number in it is one json and strtod read alike; None otherwise."""
    classes = np.frombuffer(s.translate(_NUMBERED), dtype=np.uint8)
    n = len(classes)
    if n < 4:
        return None
    counts = np.zeros(16, dtype=np.int64)
    for start in range(0, n, _SLICE):  # slices: temporaries of a few times _SLICE bytes
        counts += np.bincount(classes[start:start + _SLICE], minlength=16)
        low, high = max(start, 1), min(start + _SLICE, n - 2)  # the 4-grams centred here
        if low >= high:
            continue
        part = classes[low - 1:high + 2]
        pairs = (part[:-1] << 4) | part[1:]  # (class i, class i + 1) in one byte
        code = (pairs[:-2].astype(np.uint16) << 8) | pairs[2:]
        if _BAD[code].any():
            return None
    return counts


def _rows_of(s: bytes, opens: np.ndarray, closes: np.ndarray, x_dim: int) -> int | None:
    """The rows of the 2-D array opened by ``opens[0]``, each ``x_dim`` numbers and apart by one
    comma (``opens``, ``closes``: the brackets from there on); None when it is not so."""
    o, cl = opens[1:], closes
    m = min(len(o), len(cl))
    after = np.flatnonzero(o[:m] > cl[:m])
    rows = int(after[0]) if after.size else m
    if rows == 0 or rows >= len(cl) or not np.all(cl[:rows - 1] < o[1:rows]):
        return None
    if s.count(b" ", opens[0] + 1, o[0]) != o[0] - opens[0] - 1:
        return None
    if s.count(b" ", cl[rows - 1] + 1, cl[rows]) != cl[rows] - cl[rows - 1] - 1:
        return None
    for k in range(rows):
        start, end = int(o[k]) + 1, int(cl[k])
        if (s.count(b",", start, end) != x_dim - 1
                or s.count(b" ", start, end) == end - start):  # an empty row
            return None
        if k + 1 < rows and s[end + 1:int(o[k + 1])].strip(b" ") != b",":
            return None
    return rows


def _fromtext(text: bytes, out: np.ndarray) -> bool:
    """Numbers of ``text`` (brackets dropped) into ``out``; False unless exactly that many."""
    try:
        values = np.fromstring(text.translate(None, b"[]"), dtype=np.float64, sep=",")
    except ValueError:
        return False
    if values.size != out.size:
        return False
    out[...] = values.reshape(out.shape)
    return True


def parse_plain_chunk(
    body: bytes, x_dim: int
) -> tuple[bytearray, np.ndarray | None, np.ndarray | None] | None:
    """The block and its x and y (views of it) of a chunk in plain JSON form; None otherwise."""
    s = body.translate(_CLASSES)
    counts = None if b"?" in s else _grammar(s)
    if counts is None:
        return None
    # without blanks: no empty number (numpy reads " " as -1) and no integer part of 19 digits
    # or more (json refuses integers past 64 bits)
    packed = s.translate(_DIGITS, b" ")
    if (b",," in packed or b",]" in packed or b"[," in packed
            or any(start + b"1" * 19 in packed for start in (b",", b"[", b"-"))):
        return None
    del packed
    classes = np.frombuffer(s, dtype=np.uint8)
    opens = np.flatnonzero(classes == ord("["))
    closes = np.flatnonzero(classes == ord("]"))
    del classes
    spans: dict[bytes, tuple[int, int, int]] = {}  # key -> (start, end, rows)
    row_ends = closes[:0]  # where each row of x closes
    head = _HEAD.fullmatch(s, 0, int(opens[0])) if opens.size else None
    used_open = used_close = 0
    pattern_end = head.end() if head else 0
    key = head.group(1) if head else None
    while key is not None:
        if key in spans or used_open >= len(opens) or opens[used_open] != pattern_end:
            return None
        if key == b"x":
            if not x_dim:
                return None
            rows = _rows_of(s, opens[used_open:], closes[used_close:], x_dim)
            if rows is None:
                return None
            spans[key] = (int(opens[used_open]), int(closes[used_close + rows]), rows)
            row_ends = closes[used_close:used_close + rows]
            used_open, used_close = used_open + rows + 1, used_close + rows + 1
        else:
            start, end = int(opens[used_open]), int(closes[used_close])
            if (used_open + 1 < len(opens) and opens[used_open + 1] < end) or end < start:
                return None
            numbers = s.count(b",", start, end) + 1
            if s.count(b" ", start + 1, end) == end - start - 1:  # []: no numbers
                return None
            spans[key] = (start, end, numbers)
            used_open, used_close = used_open + 1, used_close + 1
        end = spans[key][1] + 1
        after = _BETWEEN.match(s, end)
        if after is not None and used_open < len(opens):
            key, pattern_end = after.group(1), after.end()
            continue
        if _TAIL.fullmatch(s, end) is None or used_open != len(opens) or used_close != len(
                closes):
            return None
        key = None
    keys = len(spans)
    skeleton = [counts[_SYMBOLS.index(char)] for char in b'{}":xy']
    if not keys or skeleton != [1, 1, 2 * keys, keys, b"x" in spans, b"y" in spans]:
        return None  # e.g. a key or brace inside an array
    del s, opens, closes
    rows = spans[b"x"][2] if b"x" in spans else spans[b"y"][2]
    if b"y" in spans and spans[b"y"][2] != rows:
        return None
    columns = x_dim if b"x" in spans else 0
    buffer = bytearray(HEADER.size + 8 * rows * (columns + (b"y" in spans)))
    HEADER.pack_into(buffer, 0, rows, columns, int(b"y" in spans))
    x = y = None
    offset = HEADER.size
    if b"x" in spans:
        start, end, _ = spans[b"x"]
        x = np.frombuffer(buffer, dtype="<f8", count=rows * columns, offset=offset)
        x = x.reshape(rows, columns)
        offset += 8 * rows * columns
        step = max(1, _PIECE_BYTES * rows // max(end - start, 1))
        for first in range(0, rows, step):
            last = min(first + step, rows)
            piece = body[(int(row_ends[first - 1]) + 1 if first else start + 1):
                         int(row_ends[last - 1]) + 1]
            if not _fromtext(piece.lstrip(b" \t\n\r,"), x[first:last]):
                return None
    if b"y" in spans:
        start, end, _ = spans[b"y"]
        y = np.frombuffer(buffer, dtype="<f8", count=rows, offset=offset)
        if not _fromtext(body[start + 1:end], y):
            return None
    return buffer, x, y
