"""Japanese normalisation: numbers written in Arabic digits, rewritten in kanji numerals.

The Kokoro front end reads pyopenjtalk's words one by one, so a number in digits loses the reading
its counter gives it: ``3月`` "san tsuki", ``5日`` "go jitsu", ``20日`` "ni juu bi", ``3人``
"san jin", ``2人`` "ni hito", ``10本`` "juu hon", ``1つ`` "ichi tsu", ``20歳`` "ni juu toshi"
(measured). In kanji numerals pyopenjtalk reads the number and counter together: 三月 "sangatsu",
五日 "itsuka", 二十日 "hatsuka", 三人 "sannin", 二人 "futari", 十本 "juppon", 一つ "hitotsu", 二十歳
"hatachi". It also drops the point of ``3.5`` ("san go") and a ``%`` ("go" for ``5%``), and reads
``1,234`` as "ichi, ni hyaku ...".

Rule **numbers**: a number in digits (ASCII or full width) is rewritten in kanji numerals when a
counter of :data:`COUNTERS` follows it (``2024年3月5日`` 2024年三月五日), when it has a decimal point
(``3.5`` 三点五) or thousands separators (``1,234`` 千二百三十四), and with a following ``%`` as
パーセント (``3.5%`` 三点五パーセント). Leaves: a plain number without a counter (read right), one
before a counter read right in digits (``年``, ``円``, ``時`` ...), one before ``分`` (in kanji
pyopenjtalk reads 五分 "gobu", a fraction, not "gofun"), numbers inside words of Latin letters
(``A4``, ``iPhone15``), numbers of 10^16 and more.
"""

from __future__ import annotations

import re
from typing import Final

from tts_core.text.normalization_rule import Edit, Rule

COUNTERS: Final = ("月", "日", "人", "つ", "歳", "本", "階")
"""Counters after which pyopenjtalk misreads a number in digits (measured: ``3月``, ``5日``, ``20日``,
``10日間``, ``3人``, ``2人``, ``1つ``, ``20歳``, ``10本``, ``3階``); other numbers before them are
read the same either way. Not here, read right in digits: 年 円 時 回 匹 杯 個 冊 台 件 枚 万."""

_KANJI_DIGITS: Final = "〇一二三四五六七八九"
_SMALL_UNITS: Final = ((1000, "千"), (100, "百"), (10, "十"))
_LARGE_UNITS: Final = ("", "万", "億", "兆")
_LIMIT: Final = 10**16
_DIGITS: Final = r"0-9\uff10-\uff19"
"""ASCII and full-width digits (``int`` reads both)."""
_LETTERS: Final = r"A-Za-z\uff21-\uff3a\uff41-\uff5a"
_POINT, _COMMA, _PERCENT = "\uff0e", "\uff0c", "\uff05"
NUMBER: Final = re.compile(
    rf"(?<![{_DIGITS}{_LETTERS}.,{_POINT}{_COMMA}])([{_DIGITS}]{{1,16}}(?:[,{_COMMA}][{_DIGITS}]{{3}}){{0,5}})"
    rf"(?:[.{_POINT}]([{_DIGITS}]{{1,8}}))?(?![{_DIGITS}{_LETTERS}])([%{_PERCENT}])?"
)


def kanji_number(number: int) -> str:
    """``number`` (0 to 10^16 - 1) in kanji numerals as written to be read: 2024 二千二十四, 10000 一万."""
    if not 0 <= number < _LIMIT:
        raise ValueError(f"{number} is out of range for kanji numerals")
    if number == 0:
        return "零"
    parts: list[str] = []
    for power, unit in enumerate(_LARGE_UNITS):
        group = number // 10 ** (4 * power) % 10_000
        if group:
            parts.insert(0, _below_ten_thousand(group) + unit)
    return "".join(parts)


def _below_ten_thousand(group: int) -> str:
    said = ""
    for value, unit in _SMALL_UNITS:
        digit = group // value % 10
        if digit:
            said += ("" if digit == 1 else _KANJI_DIGITS[digit]) + unit
    return said + (_KANJI_DIGITS[group % 10] if group % 10 else "")


def _number(m: re.Match[str]) -> Edit | None:
    whole, fraction, percent = m.groups()
    grouped = "," in whole or _COMMA in whole
    if not (percent or fraction or grouped or m.string.startswith(COUNTERS, m.end())):
        return None
    digits = whole.replace(",", "").replace(_COMMA, "")
    said = kanji_number(int(digits))
    if fraction:
        said += "点" + "".join(_KANJI_DIGITS[int(d)] for d in fraction)
    return Edit(m.start(), m.end(), said + ("パーセント" if percent else ""))


RULES: Final[tuple[Rule, ...]] = (("numbers", NUMBER, _number),)
