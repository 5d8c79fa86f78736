"""The formatter: numbers, times, sizes, percentages, dates and plurals in one
language's locale, through Babel (the locale of the language's folder:
render/languages.py). Every figure a report prints is formatted here, once for all
languages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from babel import Locale
from babel.dates import format_datetime
from babel.numbers import format_decimal, format_percent
from babel.units import format_unit

from ..errors import WorkFailed
from . import markup
from .languages import Language, codes, language

def _codes_at_import() -> tuple[str, ...]:
    try:
        return codes()
    except WorkFailed:  # no usable language: each command says so in one line
        return ()


LANGUAGES = _codes_at_import()  # the languages found when reporter was imported


def check_language(lang: str) -> str:
    return language(lang).code


@dataclass(frozen=True)
class Fmt:
    """Babel formatting for one locale."""

    lang: str

    @cached_property
    def language(self) -> Language:
        return language(self.lang)

    @cached_property
    def locale(self) -> Locale:
        return Locale.parse(self.language.locale)

    def num(self, value: float | None, digits: int | None = None) -> str:
        if value is None:
            return "—"
        if (beyond := _beyond(value)) is not None:
            return beyond
        if digits is None:
            a = abs(value)
            digits = 0 if a >= 100 else 1 if a >= 10 else 2 if a >= 0.1 else 3
        pattern = "#,##0" + ("." + "0" * digits if digits else "")
        return self._minus(format_decimal(_no_negative_zero(value, digits), format=pattern,
                                          locale=self.locale))

    def count(self, value: float | None) -> str:
        """A count averaged over steps (kernels launched per step): whole, as a count is
        ("79", not "79.0"; "1", not "1.00"); one that rounds to none keeps a decimal."""
        if value is None:
            return "—"
        if (beyond := _beyond(value)) is not None:
            return beyond
        whole = round(value)
        return self.int(whole) if whole or not value else self.num(value)

    def span(self, low: float, high: float, digits: int | None = None
             ) -> tuple[str, str | None]:
        """The two ends of a range, with as many more decimals as it takes (two at most)
        for them to differ: "125.8–126.1", not "126–126"; the high end is None when they
        are still the same, and the range prints as one value."""
        if digits is None:
            a = max(abs(low), abs(high))
            digits = 0 if a >= 100 else 1 if a >= 10 else 2 if a >= 0.1 else 3
        lo, hi = self.num(low, digits), self.num(high, digits)
        for more in (1, 2):
            if lo != hi:
                break
            lo, hi = self.num(low, digits + more), self.num(high, digits + more)
        return (lo, hi) if lo != hi else (self.num(low, digits), None)

    def int(self, value: int | None) -> str:
        if value is None:
            return "—"
        if (beyond := _beyond(value)) is not None:
            return beyond
        return self._minus(format_decimal(int(value), locale=self.locale))

    def pct(self, share: float | None) -> str:
        if share is None:
            return "—"
        if (beyond := _beyond(share * 100)) is not None:
            return beyond + "%"
        if abs(round(share * 100, 1)) == 100:  # a whole 100: "100 %", not "100,0 %"
            return self._minus(format_percent(math.copysign(1, share), locale=self.locale))
        # The locale's own pattern (ru puts a space before %), with one decimal.
        return self._minus(format_percent(_no_negative_zero(share, 3),
                                          format=_one_decimal(self.locale), locale=self.locale))

    def fine_pct(self, share: float | None) -> str:
        """pct, with as many more decimals as it takes (three at most) for a share that is
        not zero not to print as 0.0%: a confidence interval of ±0.02%, not ±0.0%."""
        if share is None or share == 0 or round(share * 100, 1) != 0:
            return self.pct(share)
        pattern = _one_decimal(self.locale)
        for digits in (2, 3):
            if round(share * 100, digits) != 0:
                break
        pattern = pattern.replace("0.0", "0." + "0" * digits, 1)
        return self._minus(format_percent(share, format=pattern, locale=self.locale))

    def times(self, ratio: float) -> str:
        """A ratio "1.3" (as in 1.3× faster), with as many more decimals as it takes (three
        at most) not to read 1.0 where it is not exactly 1: "1.03"."""
        digits = 1
        while digits < 3 and ratio != 1 and round(ratio, digits) == 1:
            digits += 1
        return self.num(ratio, digits)

    def whole_pct(self, share: float) -> str:
        """A threshold in whole percent, the locale's way: "3%", "3 %"."""
        return self._minus(format_percent(share, locale=self.locale))

    def whole_time(self, us: float) -> str:
        """A threshold time in whole microseconds, the locale's way: "10 μs", "10 мкс"."""
        return self._unit(round(us), "duration-microsecond", "#,##0")

    def signed_pct(self, share: float) -> str:
        return ("+" if share > 0 else "−" if share < 0 else "") + self.pct(abs(share))

    def time(self, us: float | None) -> str:
        if us is None:
            return "—"
        a = abs(us)
        if a >= 1e6:
            value, unit = us / 1e6, "duration-second"
        elif a >= 1e3:
            value, unit = us / 1e3, "duration-millisecond"
        else:
            value, unit = us, "duration-microsecond"
        if value == 0:  # nothing at all: "0", not "0.00 μs" ("from 0 to 435 ms")
            return "0"
        rounded = _no_negative_zero(_round(value), 2)
        return self._unit(rounded, unit, _pattern(rounded))

    def bytes(self, b: float | None) -> str:  # an int is a float to a type checker
        if b is None:
            return "—"
        if b == 0:
            return "0"
        a = abs(b)
        for size, unit in ((1 << 30, "digital-gigabyte"), (1 << 20, "digital-megabyte"),
                           (1 << 10, "digital-kilobyte")):
            if a >= size:
                value = _round(b / size)
                return self._unit(value, unit, _pattern(value))
        return self._unit(_no_negative_zero(b / 1024, 2), "digital-kilobyte", "#,##0.##")

    def si(self, value: float | None, unit: str) -> str:
        """A rate or a count with an SI prefix: "1.2 TFLOP/s", "310 GB/s"; the number is
        the locale's, and so is the unit where language.json's ``units`` names it
        ("GB/s": "ГБ/с"); FLOP and FLOP/s are written the same in every language."""
        if value is None:
            return "—"
        for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
            if abs(value) >= scale:
                return self.num(value / scale) + "\u00a0" + self._si_unit(prefix + unit)
        return self.num(value) + "\u00a0" + self._si_unit(unit)

    def _si_unit(self, unit: str) -> str:
        return self.language.units.get(unit, unit)

    def _unit(self, value: float, unit: str, pattern: str) -> str:
        """A number and its unit as this language's engineers write them: Babel's unit, or
        the language's own word for it (language.json: units); a no-break space between them;
        the language's minus sign."""
        lang = self.language
        if (beyond := _beyond(value)) is not None:  # not a number Babel can round
            return beyond + "\u00a0" + (lang.units.get(unit) or _SYMBOLS.get(unit, unit))
        if unit in lang.units:
            text = (format_decimal(value, format=pattern, locale=self.locale) + " "
                    + lang.units[unit])
        else:
            text = format_unit(value, unit, length="short", locale=self.locale, format=pattern)
        for old, new in lang.replace:
            text = text.replace(old, new)
        return self._minus(text.replace(" ", "\u00a0"))

    def _minus(self, text: str) -> str:
        sign = self.language.minus
        return sign + text[1:] if sign and text.startswith("-") else text

    def date(self, iso: str) -> str:
        return format_datetime(datetime.fromisoformat(iso), "medium", locale=self.locale,
                               tzinfo=None)

    def plural(self, n: float, **forms: str) -> str:
        """The word for n in this language: forms named by CLDR category (one, few, many, other)."""
        category = self.locale.plural_form(n)
        return forms.get(category) or forms.get("other") or next(iter(forms.values()))


# Babel rounds with the decimal module's 28 digits: beyond them quantizing fails
# (InvalidOperation). A number this large in a profile is a corrupted or crafted input,
# printed as it is, in scientific notation.
MAX_FORMATTED = 1e18


_SYMBOLS = {"duration-second": "s", "duration-millisecond": "ms", "duration-microsecond": "µs",
            "digital-gigabyte": "GB", "digital-megabyte": "MB", "digital-kilobyte": "kB"}


def _beyond(value: float) -> str | None:
    """How to print a number that Babel cannot (not finite, or over MAX_FORMATTED), or
    None for any other."""
    try:
        f = float(value)
    except OverflowError:  # an integer beyond the floats
        return ">1e308" if value > 0 else "<-1e308"
    if math.isnan(f):
        return "—"
    if math.isinf(f) or abs(f) >= MAX_FORMATTED:
        return f"{f:.3g}"
    return None


def _one_decimal(loc: Locale) -> str:
    """The locale's percent pattern with one decimal: "#,##0 %" -> "#,##0.0 %"."""
    pattern = loc.percent_formats[None].pattern
    i = pattern.rfind("0")
    return pattern[:i + 1] + ".0" + pattern[i + 1:]


def _no_negative_zero(value: float, digits: int) -> float:
    """A value that rounds to zero prints as 0, never as -0."""
    return 0.0 if round(value, digits) == 0 else value


def _round(value: float) -> float:
    a = abs(value)
    return round(value, 0 if a >= 100 else 1 if a >= 10 else 2)


def _pattern(value: float) -> str:
    a = abs(value)
    return "#,##0" if a >= 100 else "#,##0.0" if a >= 10 else "#,##0.00"


md_text = markup.text  # free text (an error message): one line, no markup
md_name = markup.code  # an operator name: inline code, safe in a pipe table
